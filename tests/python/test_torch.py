"""The family's PyTorch model (tools/train_family.py) as a real producer and
consumer through the scdb module (python/examples/torch_family.py)."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import scdb

HERE = os.path.dirname(os.path.abspath(__file__))


def heldout(data_dir, domain, n, offset):
    with open(os.path.join(data_dir, "heldout", domain + ".txt"), "rb") as f:
        f.seek(offset)
        return np.frombuffer(f.read(n), dtype=np.uint8).astype(np.int32)


def read_safetensors(path):
    """{name: numpy array} of an F32/I32 safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, t in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        dt = {"F32": "<f4", "I32": "<i4"}[t["dtype"]]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(t["shape"])
    return out


def test_cached_forward_is_the_training_model(torch_family, data_dir):
    """The consumer's incremental forward over scdb's cache layout gives the
    training code's own logits (prefill, then token by token)."""
    import torch
    tf = torch_family
    m = tf.load("code")
    toks = heldout(data_dir, "code", 96, 4096)
    with torch.no_grad():
        ref = m(torch.as_tensor(toks, dtype=torch.long)[None])[0]
    cache = tf.Cache.private(m, 128)
    got = tf.forward(m, toks[:80], cache)
    for i in range(80, 96):
        got = torch.cat([got, tf.forward(m, toks[i:i + 1], cache)])
    assert cache.n == 96
    assert float((got - ref).abs().max()) < 1e-4


def test_raw_get_gives_own_prefill_logits(torch_family, broker, data_dir):
    """Producer base puts its prefill's raw KV (f32); consumer base gets it into
    an arena, wraps it as torch tensors with no copy, prefills only the suffix
    in place: its logits are within 1e-3 of its own full prefill."""
    import torch
    tf = torch_family
    m = tf.load("base")
    toks = heldout(data_dir, "english", 200, 9000)        # 3 full blocks + 8
    with scdb.Client(broker.endpoint) as p:
        info = p.register("base", "producer")           # raw/base, f32 here
        own = tf.Cache.private(m, 256)
        logits_own = tf.forward(m, toks, own)
        r = p.put(toks, tf.raw_payloads(own, len(toks), info["block_tokens"]))
        assert r["n_stored"] == 3
    with scdb.Client(broker.endpoint) as c:
        c.register("base", "consumer")
        with c.arena(256) as a:
            assert c.lookup(toks) == 192
            assert c.get(toks, a) == 192
            kv = tf.Cache.of_arena(a)
            assert kv.k.data_ptr() == a.k.ctypes.data     # no copy
            assert kv.pos.data_ptr() == a.pos.ctypes.data
            a.n = 191                                     # re-run the last prefix token
            logits = tf.forward(m, toks[191:], kv)       # into the arena, in place
            assert a.n == 200
            diff = float((logits - logits_own[191:]).abs().max())
            assert diff <= 1e-3, diff
            # the suffix KV the model appended is in the arena's memory
            assert np.allclose(a.k[:, 192:200], own.k[:, 192:200].numpy(), atol=1e-5)
            # and the continuation is the same
            gen_own, _ = tf.greedy(m, own, logits_own[-1:], 8)
            gen, _ = tf.greedy(m, kv, logits[-1:], 8)
            assert gen == gen_own


def test_scd_get_is_the_c_clients_decode(torch_family, broker, data_dir, tmp_path):
    """Producer base hands its prefill's states to the broker (put_states); the
    KV a Python get decodes for consumer `code` is bit-identical to what the C
    client (`scdb get --out`) receives for the same prompt."""
    import torch
    tf = torch_family
    toks = heldout(data_dir, "code", 256, 20000)
    base = tf.load("base")
    with scdb.Client(broker.endpoint) as p:
        info = p.register("base", "producer", "base-scd")
        assert info["states_layers"] == 8 and info["states_dim"] == 128
        with p.states_arena(len(toks)) as sa:
            h_in = torch.from_numpy(sa.states(len(toks)))
            tf.forward(base, toks, tf.Cache.private(base, 256), h_in=h_in)
            assert p.put_states(toks, sa) == {"n_full": 4, "n_stored": 4, "n_new": 4, "n_replaced": 0}
            bad = sa.states(len(toks))
            bad[3, 70, 5] = np.nan
            toks2 = toks.copy()
            toks2[64:] = (toks2[64:] + 1) % 256                # new blocks 1..3
            with pytest.raises(scdb.RangeError):
                p.put_states(toks2, sa)                      # non-finite states
            with pytest.raises(scdb.RangeError):
                p.put_states(np.zeros(300, np.int32), sa)     # more than the arena holds
    with scdb.Client(broker.endpoint) as c:
        c.register("code", "consumer", "base-scd")
        with c.arena(256) as a:
            assert c.get(toks, a) == 256
            py = {"pos": a.pos[:256].copy(), "k": a.k[:, :256].copy(), "v": a.v[:, :256].copy()}
    text = tmp_path / "prompt.txt"
    text.write_bytes(toks.astype(np.uint8).tobytes())
    out = tmp_path / "kv.safetensors"
    r = subprocess.run([os.environ.get("SCDB_BIN", "scdb"), "get", "--endpoint", broker.endpoint,
                        "--model", "code", "--codebook", "base-scd", "--text", str(text),
                        "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ref = read_safetensors(out)
    for name in ("pos", "k", "v"):
        assert ref[name].shape == py[name].shape
        assert np.array_equal(ref[name], py[name]), name   # bit-identical
    # and it is the consumer's KV space, not the producer's: close to what
    # `code` computes itself, far from base's raw K
    code = tf.load("code")
    own = tf.Cache.private(code, 256)
    tf.forward(code, toks, own)
    raw = tf.Cache.private(base, 256)
    tf.forward(base, toks, raw)
    err_scd = np.abs(py["k"] - own.k.numpy()).mean()
    err_raw = np.abs(raw.k.numpy() - own.k.numpy()).mean()
    assert err_scd < err_raw


def test_fanout_script(broker):
    """python/examples/fanout.py runs end to end and prints the demo's table."""
    pytest.importorskip("torch", reason="PyTorch is not installed")
    script = os.path.join(HERE, "..", "..", "python", "examples", "fanout.py")
    r = subprocess.run([sys.executable, script, "--gen", "8"], capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "producer base: prefilled 384 tokens" in r.stdout
    for name in ("code", "manpages"):
        row = [line for line in r.stdout.splitlines() if line.startswith(f"| {name} |")]
        assert len(row) == 1 and "/8 |" in row[0]
    assert r.stdout.rstrip().endswith("fanout: ok")
