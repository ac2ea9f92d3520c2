#!/usr/bin/python3
"""Export a model of scdb's family into the Hugging Face Llama layout.

  tools/export_hf.py SRC_DIR OUT_DIR [--dtype f32|f16|bf16] [--shards N]

SRC_DIR is a model directory in scdb's own layout (config.json with d_model,
n_layers, ...; model.safetensors with llama.c-style names, as
tools/train_family.py writes them).  OUT_DIR receives what transformers'
save_pretrained() would write for LlamaForCausalLM:

  config.json                 LlamaConfig keys (hidden_size, num_hidden_layers,
                              num_attention_heads, num_key_value_heads,
                              head_dim, intermediate_size, rms_norm_eps,
                              rope_theta, max_position_embeddings, vocab_size,
                              tie_word_embeddings, ...) plus an "scdb" object
                              with the family's name, domain, parent, finetune
  model.safetensors           --shards 1 (the default), or
  model-0000N-of-0000M.safetensors + model.safetensors.index.json
                              --shards M, split by size in tensor order

Tensor names are transformers' (model.embed_tokens.weight,
model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight); values are
copied unchanged, since the family applies RoPE in the same "rotate half"
convention as transformers' Llama (pairs (i, i + head_dim/2)), so no q/k
permutation is needed.  f16 and bf16 round to nearest even, as torch does.
scdb's loader (model/hf_checkpoint.c) reads the result; with --dtype f32 its
logits are bit-identical to the source's (tests/test_model_hf.c).

Standard library only (numpy is used when present, for speed): no PyTorch.
"""
import argparse
import array
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover - the pure-Python path is the fallback
    np = None

LAYER_NAMES = (
    ("attention_norm.weight", "input_layernorm.weight"),
    ("attention.wq.weight", "self_attn.q_proj.weight"),
    ("attention.wk.weight", "self_attn.k_proj.weight"),
    ("attention.wv.weight", "self_attn.v_proj.weight"),
    ("attention.wo.weight", "self_attn.o_proj.weight"),
    ("ffn_norm.weight", "post_attention_layernorm.weight"),
    ("feed_forward.w1.weight", "mlp.gate_proj.weight"),
    ("feed_forward.w3.weight", "mlp.up_proj.weight"),
    ("feed_forward.w2.weight", "mlp.down_proj.weight"),
)
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
ST_DTYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}


def read_safetensors(path):
    """{name: (dtype, shape, raw bytes)} of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise SystemExit(f"{path}: truncated")
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        if base + b > len(raw):
            raise SystemExit(f"{path}: tensor {k} runs past the end of the file")
        out[k] = (v["dtype"], list(v["shape"]), raw[base + a:base + b])
    return out


def to_f32(dtype, raw):
    """raw tensor bytes of dtype -> little-endian f32 bytes"""
    if dtype == "F32":
        return raw
    if dtype == "BF16":
        if np is not None:
            u = np.frombuffer(raw, dtype="<u2").astype("<u4") << 16
            return u.tobytes()
        h = array.array("H", raw)
        return array.array("I", (x << 16 for x in h)).tobytes()
    if dtype == "F16":
        if np is not None:
            return np.frombuffer(raw, dtype="<f2").astype("<f4").tobytes()
        n = len(raw) // 2
        return struct.pack(f"<{n}f", *struct.unpack(f"<{n}e", raw))
    raise SystemExit(f"unsupported dtype {dtype} (want F32, F16 or BF16)")


def from_f32(raw, dtype):
    """little-endian f32 bytes -> bytes of dtype ("f32", "f16", "bf16"),
    rounding to nearest even"""
    if dtype == "f32":
        return raw
    if dtype == "f16":
        if np is not None:
            return np.frombuffer(raw, dtype="<f4").astype("<f2").tobytes()
        n = len(raw) // 4
        return struct.pack(f"<{n}e", *struct.unpack(f"<{n}f", raw))
    # bf16: the upper half of the f32 bits, rounded to nearest even; NaN stays NaN
    if np is not None:
        u = np.frombuffer(raw, dtype="<u4").astype(np.uint64)
        nan = (u & 0x7FFFFFFF) > 0x7F800000
        r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
        r = np.where(nan, (u >> 16) | 0x40, r)
        return r.astype("<u2").tobytes()
    out = array.array("H")
    for x in array.array("I", raw):
        if (x & 0x7FFFFFFF) > 0x7F800000:
            out.append((x >> 16) | 0x40)
        else:
            out.append(((x + 0x7FFF + ((x >> 16) & 1)) >> 16) & 0xFFFF)
    return out.tobytes()


def write_safetensors(path, tensors, metadata):
    """tensors: list of (name, st dtype, shape, raw bytes), written in order."""
    header, off = {"__metadata__": metadata}, 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, _, raw in tensors:
            f.write(raw)
    os.replace(tmp, path)


def hf_config(c, dtype):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": c["d_model"],
        "intermediate_size": c["d_ff"],
        "num_hidden_layers": c["n_layers"],
        "num_attention_heads": c["n_heads"],
        "num_key_value_heads": c["n_kv_heads"],
        "head_dim": c["head_dim"],
        "hidden_act": "silu",
        "max_position_embeddings": c["max_seq_len"],
        "rms_norm_eps": c["norm_eps"],
        "rope_theta": c["rope_theta"],
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": c["vocab_size"],
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "torch_dtype": TORCH_DTYPE[dtype],
        "scdb": {k: c.get(k) for k in ("name", "domain", "parent", "finetune")},
    }


def export(src, out, dtype="f32", shards=1):
    with open(os.path.join(src, "config.json")) as f:
        c = json.load(f)
    if "hidden_size" in c:
        raise SystemExit(f"{src}: already in the Hugging Face layout")
    st = read_safetensors(os.path.join(src, "model.safetensors"))
    names = [("tok_embeddings.weight", "model.embed_tokens.weight")]
    for i in range(c["n_layers"]):
        names += [(f"layers.{i}.{a}", f"model.layers.{i}.{b}") for a, b in LAYER_NAMES]
    names += [("norm.weight", "model.norm.weight"), ("output.weight", "lm_head.weight")]
    tensors = []
    for own, hf in names:
        if own not in st:
            raise SystemExit(f"{src}/model.safetensors: tensor {own} missing")
        dt, shape, raw = st[own]
        tensors.append((hf, ST_DTYPE[dtype], shape, from_f32(to_f32(dt, raw), dtype)))
    if not 1 <= shards <= len(tensors):
        raise SystemExit(f"--shards must be in [1, {len(tensors)}]")

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(hf_config(c, dtype), f, indent=2)
        f.write("\n")
    meta = {"format": "pt"}
    if shards == 1:
        write_safetensors(os.path.join(out, "model.safetensors"), tensors, meta)
        return
    # split by size in tensor order: move to the next shard once this one
    # holds its share of the bytes, or when the tensors left are just
    # enough to give every remaining shard one
    total = sum(len(t[3]) for t in tensors)
    groups, k, cum = [[] for _ in range(shards)], 0, 0
    for i, t in enumerate(tensors):
        groups[k].append(t)
        cum += len(t[3])
        left = len(tensors) - i - 1
        if k < shards - 1 and (cum * shards >= (k + 1) * total or left == shards - 1 - k):
            k += 1
    weight_map = {}
    for k, g in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(out, fname), g, meta)
        for t in g:
            weight_map[t[0]] = fname
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total},
                   "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src", help="model directory in scdb's layout")
    ap.add_argument("out", help="output directory (created)")
    ap.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32")
    ap.add_argument("--shards", type=int, default=1,
                    help="1: model.safetensors; N > 1: N shards + index")
    a = ap.parse_args()
    export(a.src, a.out, a.dtype, a.shards)
    return 0


if __name__ == "__main__":
    sys.exit(main())
