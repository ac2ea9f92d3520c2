"""Producers are fingerprint-checked at registration as consumers are
(issue 25 item 1): a producer running other weights than its codebook was
fitted for would store codes that every consumer decodes as the codebook
producer's, silently."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

import scdb


def scaled_copy(src, dst, tensor, factor):
    """A copy of model directory src with one tensor of model.safetensors
    multiplied by factor (the file's layout unchanged)."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
        t = hdr[tensor]
        dt = {"F32": np.float32, "F16": np.float16, "BF16": None}[t["dtype"]]
        assert dt is not None, "bf16 weights: not handled here"
        a, b = t["data_offsets"]
        f.seek(8 + n + a)
        x = np.frombuffer(f.read(b - a), dtype=dt).copy()
        f.seek(8 + n + a)
        f.write((x * dt(factor)).astype(dt).tobytes())
    return dst


def test_producer_with_other_weights_is_refused(broker, data_dir, tmp_path):
    base = os.path.join(data_dir, "models", "base")
    other = scaled_copy(base, str(tmp_path / "base"), "layers.3.attention.wk.weight", 1.02)
    fp_base, fp_other = scdb.weights_fingerprint(base), scdb.weights_fingerprint(other)
    assert fp_base != fp_other
    with scdb.Client(broker.endpoint) as c:
        # the real weights: the codebook's
        assert c.register("base", "producer", "base-scd", model_dir=base)["role"] == "producer"
        assert c.register("base", "producer", "base-scd", weights_fp=fp_base)["role"] == "producer"
        for kw in ({"model_dir": other}, {"weights_fp": fp_other}):
            with pytest.raises(scdb.MismatchError) as e:
                c.register("base", "producer", "base-scd", **kw)
            assert fp_base in e.value.message and fp_other in e.value.message
        with pytest.raises(scdb.InvalidError):
            c.register("base", "producer", "base-scd", weights_fp="XYZ")
        # a raw codebook's payload is the producer's own KV: nothing to check
        assert c.register("base", "producer", model_dir=other)["role"] == "producer"
        c.register("base", "producer", "base-scd")               # none given: not checked
