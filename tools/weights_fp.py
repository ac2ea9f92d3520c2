#!/usr/bin/python3
"""The weights fingerprint of a model directory, written from its definition
in schema/FORMATS.md ("Weights fingerprint") alone: an implementation in
another language than scdb's C (schema/weights_fp.c), which test_weights_fp
compares with it.

  tools/weights_fp.py DIR [DIR...]      one line per directory: FP  DIR
  tools/weights_fp.py --stream DIR OUT  also write the hashed byte stream

Needs numpy (python3-numpy) and libxxhash (libxxhash0, through ctypes: the
hash is XXH3-128 with seed 0).  Reads safetensors files with the standard
library (an 8-byte little-endian header length, a JSON header, the data).
"""
import ctypes
import ctypes.util
import json
import os
import struct
import sys

import numpy as np

TAG = b"scdb-weights-1\0"
INDEX = "model.safetensors.index.json"

TOP = {"tok_embeddings.weight": "model.embed_tokens.weight",
       "norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}
LAYER = {"attention_norm.weight": "input_layernorm.weight",
         "attention.wq.weight": "self_attn.q_proj.weight",
         "attention.wk.weight": "self_attn.k_proj.weight",
         "attention.wv.weight": "self_attn.v_proj.weight",
         "attention.wo.weight": "self_attn.o_proj.weight",
         "ffn_norm.weight": "post_attention_layernorm.weight",
         "feed_forward.w1.weight": "mlp.gate_proj.weight",
         "feed_forward.w3.weight": "mlp.up_proj.weight",
         "feed_forward.w2.weight": "mlp.down_proj.weight"}


def canonical(name, hf):
    """The Hugging Face name of a tensor the model reads, else None."""
    top = set(TOP.values()) if hf else TOP
    if name in top:
        return name if hf else TOP[name]
    prefix = "model.layers." if hf else "layers."
    if not name.startswith(prefix):
        return None
    num, dot, rest = name[len(prefix):].partition(".")
    if not dot or not num.isdigit() or not num.isascii() or (len(num) > 1 and num[0] == "0"):
        return None
    suffixes = set(LAYER.values()) if hf else LAYER
    if rest not in suffixes:
        return None
    return "model.layers.%s.%s" % (num, rest if hf else LAYER[rest])


def widen_f16(h):
    """f16 bit patterns -> the f32 bit patterns of the same values (NaN
    payloads kept: sign | 0x7f800000 | mantissa << 13)."""
    h = h.astype("<u4")
    sign, exp, mant = (h & 0x8000) << 16, (h >> 10) & 0x1F, h & 0x3FF
    out = sign | ((exp + 112) << 23) | (mant << 13)                 # normal
    out = np.where(exp == 31, sign | 0x7F800000 | (mant << 13), out)  # inf, NaN
    sub = (mant.astype("<f4") * np.float32(2.0 ** -24)).view("<u4")  # mant 2^-24, exact
    return np.where(exp == 0, sign | sub, out).astype("<u4")


class Safetensors:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        (n,) = struct.unpack_from("<Q", self.buf, 0)
        self.header = json.loads(self.buf[8:8 + n])
        self.base = 8 + n

    def names(self):
        return [k for k in self.header if k != "__metadata__"]

    def tensor(self, name):
        """(dtype, shape, values as f32 little-endian bytes)"""
        h = self.header[name]
        a, b = h["data_offsets"]
        raw = self.buf[self.base + a:self.base + b]
        dt = h["dtype"]
        if dt == "F32":
            vals = raw
        elif dt == "F16":
            vals = widen_f16(np.frombuffer(raw, "<u2")).tobytes()
        elif dt == "BF16":   # bf16 b is the f32 with bit pattern b << 16
            vals = (np.frombuffer(raw, "<u2").astype("<u4") << 16).tobytes()
        else:
            raise ValueError("tensor %s is %s: only F32, F16, BF16" % (name, dt))
        return h["shape"], vals


def stream(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    hf = "hidden_size" in config
    tied = hf and config.get("tie_word_embeddings") is True
    one = os.path.join(model_dir, "model.safetensors")
    entries = {}   # canonical name -> (file, stored name)
    if os.path.exists(one) or not hf:
        st = Safetensors(one)
        for name in st.names():
            c = canonical(name, hf)
            if c:
                entries[c] = (st, name)
    else:
        with open(os.path.join(model_dir, INDEX)) as f:
            weight_map = json.load(f)["weight_map"]
        shards = {}
        for name, shard in weight_map.items():
            c = canonical(name, True)
            if c:
                if shard not in shards:
                    shards[shard] = Safetensors(os.path.join(model_dir, shard))
                entries[c] = (shards[shard], name)
    if tied:
        entries["lm_head.weight"] = entries["model.embed_tokens.weight"]
    out = [TAG]
    for c in sorted(entries, key=lambda s: s.encode()):
        st, name = entries[c]
        shape, vals = st.tensor(name)
        out.append(c.encode() + b"\0")
        out.append(struct.pack("<Q", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape))
        out.append(vals)
    return b"".join(out)


class XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


def xxh3_128(data):
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_128bits.restype = XXH128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    h = lib.XXH3_128bits(data, len(data))
    return "%016x%016x" % (h.high64, h.low64)


def main(argv):
    if len(argv) == 3 and argv[0] == "--stream":
        s = stream(argv[1])
        with open(argv[2], "wb") as f:
            f.write(s)
        print("%s  %s" % (xxh3_128(s), argv[1]))
        return 0
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for d in argv:
        print("%s  %s" % (xxh3_128(stream(d)), d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
