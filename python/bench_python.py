#!/usr/bin/python3
"""The Python side of `scdb bench python`: what the scdb module costs over a
384-token prompt, and PyTorch's time to first token via scdb vs its own
prefill.

    PYTHONPATH=build/python /usr/bin/python3 python/bench_python.py [--json FILE]
        [--endpoint EP] [--prefix 384] [--iters N]

With --endpoint it uses that broker (the C bench starts one and runs its C
side against the same broker and prompt); without, it starts a private one
(python/examples/scdb_broker.py).  Either way it first stores the prompt
as the demo does (producer base, PyTorch prefill, put_states with the SCD
codebook "base-scd") and then, as consumer `code`:

  py_lookup_us        median of Client.lookup(tokens), tokens an int32 array
  py_get_ms           median of Client.get(tokens, arena) of the whole prompt
  py_get_decode_ms    the broker's decode time inside those gets (median)
  torch_prefill_ms    median of the PyTorch consumer's own prefill
  torch_ttft_scdb_ms  median of lookup + get + the last prompt token's forward

JSON: those fields plus prefix, iterations, torch and numpy versions.  The
C side (c_lookup_us, c_get_ms) comes from the C bench, same run and broker.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "examples"))
import scdb  # noqa: E402
import torch  # noqa: E402
import torch_family as tfm  # noqa: E402
from scdb_broker import Broker  # noqa: E402

CODEBOOK = "base-scd"


def median_us(fn, iters):
    """Median per-call time in microseconds, timed in batches of 10."""
    batch, times = 10, []
    for _ in range(max(1, iters // batch)):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        times.append((time.perf_counter_ns() - t0) / batch / 1e3)
    return statistics.median(times)


def store_prompt(endpoint, tokens):
    base = tfm.load("base")
    with scdb.Client(endpoint) as p:
        p.register("base", scdb.PRODUCER, CODEBOOK)
        with p.states_arena(len(tokens)) as sa:
            tfm.forward(base, tokens, tfm.Cache.private(base, len(tokens)),
                        h_in=torch.from_numpy(sa.states(len(tokens))))
            p.put_states(tokens, sa)


def measure(endpoint, tokens, iters, get_iters):
    model = tfm.load("code")
    n = len(tokens)
    out = {}
    with scdb.Client(endpoint) as c:
        c.register("code", scdb.CONSUMER, CODEBOOK)
        if c.lookup(tokens) != n:
            raise RuntimeError("the prompt is not stored")
        for _ in range(1000):
            c.lookup(tokens)
        out["py_lookup_us"] = median_us(lambda: c.lookup(tokens), iters)
        out["lookup_index"] = c.stats()["index_error"] is None
        with c.arena(n) as a:
            gets, decodes = [], []
            for i in range(get_iters + 3):
                a.n = 0
                t0 = time.perf_counter_ns()
                c.get(tokens, a)
                if i >= 3:
                    gets.append((time.perf_counter_ns() - t0) / 1e6)
                    decodes.append(c.last_get["decode_ns"] / 1e6)
            out["py_get_ms"] = statistics.median(gets)
            out["py_get_decode_ms"] = statistics.median(decodes)
            kv = tfm.Cache.of_arena(a)
            ttft = []
            for i in range(7):
                a.n = 0
                t0 = time.perf_counter_ns()
                c.lookup(tokens)
                have = c.get(tokens, a)
                a.n = have - 1
                tfm.forward(model, tokens[have - 1:], kv)
                ttft.append((time.perf_counter_ns() - t0) / 1e6)
            out["torch_ttft_scdb_ms"] = statistics.median(ttft[2:])
    own = []
    for i in range(7):
        cache = tfm.Cache.private(model, n)
        t0 = time.perf_counter_ns()
        tfm.forward(model, tokens, cache)
        own.append((time.perf_counter_ns() - t0) / 1e6)
    out["torch_prefill_ms"] = statistics.median(own[2:])
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", help="a running broker (default: start a private one)")
    ap.add_argument("--prefix", type=int, default=384, help="prompt tokens (whole blocks)")
    ap.add_argument("--iters", type=int, default=20000, help="lookups timed")
    ap.add_argument("--get-iters", type=int, default=30, help="gets timed")
    ap.add_argument("--text", help="prompt text (default data/heldout/manpages.txt, from 48 KiB)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--save-tokens", help="write the prompt's tokens here (int32, native order)")
    a = ap.parse_args(argv)
    text = a.text or os.path.join(tfm.data_dir(), "heldout", "manpages.txt")
    tokens = tfm.text_tokens(text, a.prefix, (48 << 10) if os.path.getsize(text) > (49 << 10) else 0)
    if a.save_tokens:
        np.asarray(tokens, dtype=np.int32).tofile(a.save_tokens)
    broker = None
    endpoint = a.endpoint
    if not endpoint:
        broker = Broker()
        endpoint = broker.endpoint
    try:
        store_prompt(endpoint, tokens)
        r = measure(endpoint, tokens, a.iters, a.get_iters)
    finally:
        if broker:
            broker.close()
    r.update(prefix=a.prefix, lookup_iters=a.iters, get_iters=a.get_iters,
             torch=torch.__version__, numpy=np.__version__, threads=torch.get_num_threads())
    print(f"Python binding, {a.prefix}-token prompt (consumer code, codebook {CODEBOOK}):")
    print(f"  lookup               {r['py_lookup_us']:8.2f} us  (median; shared-memory index: "
          f"{'yes' if r['lookup_index'] else 'no'})")
    print(f"  get                  {r['py_get_ms']:8.2f} ms  (broker decode {r['py_get_decode_ms']:.2f} ms)")
    print(f"  torch own prefill    {r['torch_prefill_ms']:8.2f} ms")
    print(f"  torch TTFT via scdb  {r['torch_ttft_scdb_ms']:8.2f} ms  "
          f"({r['torch_prefill_ms'] / r['torch_ttft_scdb_ms']:.1f}x faster)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
