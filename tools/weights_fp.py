#!/usr/bin/python3
"""The weights fingerprint of a model directory or a GGUF model file,
written from its definition in schema/FORMATS.md ("Weights fingerprint",
"A GGUF model or adapter") alone: an implementation in another language
than scdb's C (schema/weights_fp.c), which test_weights_fp compares with it.

  tools/weights_fp.py PATH [PATH...]     one line per model: FP  PATH
  tools/weights_fp.py --stream PATH OUT  also write the hashed byte stream

PATH: a model directory (scdb's layout or a Hugging Face checkpoint, one
file or sharded) or a llama GGUF model file (version 2 or 3; F32, F16, BF16
tensors).  Adapters (PEFT directories, GGUF LoRA adapters) are not computed
here: their fingerprint is that of the merged weights (FORMATS.md), which
`scdb fingerprint` gives.

Needs numpy (python3-numpy) and libxxhash (libxxhash0, through ctypes: the
hash is XXH3-128 with seed 0).  Reads safetensors and GGUF files with the
standard library and numpy.
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


# GGUF value types: struct format of the scalars (8 = string, 9 = array)
GGUF_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
               10: "<Q", 11: "<q", 12: "<d"}
GGUF_TOP = {"token_embd.weight": "model.embed_tokens.weight",
            "output_norm.weight": "model.norm.weight",
            "output.weight": "lm_head.weight"}
GGUF_LAYER = {"attn_norm.weight": "input_layernorm.weight",
              "attn_q.weight": "self_attn.q_proj.weight",
              "attn_k.weight": "self_attn.k_proj.weight",
              "attn_v.weight": "self_attn.v_proj.weight",
              "attn_output.weight": "self_attn.o_proj.weight",
              "ffn_norm.weight": "post_attention_layernorm.weight",
              "ffn_gate.weight": "mlp.gate_proj.weight",
              "ffn_up.weight": "mlp.up_proj.weight",
              "ffn_down.weight": "mlp.down_proj.weight"}


class Gguf:
    """A GGUF file: its KVs (scalars and strings; arrays skipped) and its
    tensor infos, little-endian, version 2 or 3."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = f.read()
        if self.buf[:4] != b"GGUF":
            raise ValueError("%s: not a GGUF file" % path)
        self.pos = 4
        version = self.take("<I")
        if version not in (2, 3):
            raise ValueError("%s: GGUF version %d (2 and 3 are read)" % (path, version))
        n_t, n_kv = self.take("<Q"), self.take("<Q")
        self.kv = {}
        for _ in range(n_kv):
            key = self.string()
            self.kv[key] = self.value(self.take("<I"))
        self.tensors = {}
        for _ in range(n_t):
            name = self.string()
            ne = [self.take("<Q") for _ in range(self.take("<I"))]
            self.tensors[name] = (ne, self.take("<I"), self.take("<Q"))
        align = self.kv.get("general.alignment", 32)
        self.data = (self.pos + align - 1) // align * align

    def take(self, fmt):
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        self.pos += n
        return self.buf[self.pos - n:self.pos].decode("utf-8", "replace")

    def value(self, t):
        if t in GGUF_SCALAR:
            return self.take(GGUF_SCALAR[t])
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            for _ in range(n):
                self.value(et)
            return None
        raise ValueError("GGUF value type %d" % t)

    def tensor(self, name, head_dim=0):
        """(shape as Hugging Face writes it, f32 little-endian bytes); the
        rows of attn_q / attn_k unpermuted when head_dim is given: GGUF
        row h*hd + 2j + p holds Hugging Face row h*hd + p*hd/2 + j."""
        ne, typ, off = self.tensors[name]
        count = int(np.prod(ne)) if ne else 1
        at = self.data + off
        if typ == 0:
            v = np.frombuffer(self.buf, "<u4", count, at)
        elif typ == 1:
            v = widen_f16(np.frombuffer(self.buf, "<u2", count, at))
        elif typ == 30:
            v = np.frombuffer(self.buf, "<u2", count, at).astype("<u4") << 16
        else:
            raise ValueError("tensor %s is ggml type %d: only F32, F16, BF16" % (name, typ))
        shape = list(reversed(ne))
        if head_dim:
            rows, d = shape
            v = v.reshape(rows // head_dim, head_dim // 2, 2, d).transpose(0, 2, 1, 3)
        return shape, np.ascontiguousarray(v).astype("<u4").tobytes()


def stream_gguf(path):
    g = Gguf(path)
    if g.kv.get("general.type", "model") != "model":
        raise ValueError("%s: a GGUF %s: only models here (scdb fingerprint gives adapters)"
                         % (path, g.kv.get("general.type")))
    if g.kv.get("general.architecture") != "llama":
        raise ValueError("%s: architecture %r, not llama" % (path, g.kv.get("general.architecture")))
    d, heads = g.kv["llama.embedding_length"], g.kv["llama.attention.head_count"]
    hd = g.kv.get("llama.attention.key_length", d // heads)
    entries = {}   # Hugging Face name -> GGUF name
    for name in g.tensors:
        if name in GGUF_TOP:
            entries[GGUF_TOP[name]] = name
            continue
        blk, dot, rest = name.partition(".")
        num, dot2, rest = rest.partition(".")
        if blk == "blk" and dot and dot2 and num.isdigit() and rest in GGUF_LAYER:
            entries["model.layers.%d.%s" % (int(num), GGUF_LAYER[rest])] = name
    if "lm_head.weight" not in entries:          # no output.weight: tied
        entries["lm_head.weight"] = "token_embd.weight"
    out = [TAG]
    for c in sorted(entries, key=lambda s: s.encode()):
        name = entries[c]
        perm = name.endswith(("attn_q.weight", "attn_k.weight"))
        shape, vals = g.tensor(name, hd if perm else 0)
        out.append(c.encode() + b"\0")
        out.append(struct.pack("<Q", len(shape)) + b"".join(struct.pack("<Q", x) for x in shape))
        out.append(vals)
    return b"".join(out)


def stream(model_dir):
    if os.path.isfile(model_dir):
        with open(model_dir, "rb") as f:
            if f.read(4) == b"GGUF":
                return stream_gguf(model_dir)
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
