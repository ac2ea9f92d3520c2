#!/usr/bin/python3
"""Check a Hugging Face Llama export against the family's reference logits.

  tools/check_hf_export.py HF_DIR REFERENCE_LOGITS

HF_DIR: what tools/export_hf.py wrote (one model.safetensors, any dtype);
REFERENCE_LOGITS: the source model's reference_logits.safetensors.  The
forward pass below is a transcription of transformers' LlamaForCausalLM
(modeling_llama.py: LlamaRMSNorm, LlamaRotaryEmbedding with
inv_freq = 1 / theta^(arange(0, d, 2) / d), rotate_half,
apply_rotary_pos_emb, repeat_kv, eager attention, LlamaMLP), written from
that code and not from scdb's, so agreement shows that the export means
in transformers what it means in scdb (the RoPE convention in particular).
transformers itself is not packaged for this machine.  Needs PyTorch
(Debian's python3-torch).  Prints the largest |logit difference| per input;
exit status 1 above 1e-3 (f32) or 0.3 (f16 / bf16).
"""
import json
import math
import struct
import sys

import torch
import torch.nn.functional as F

DT = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32}


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            buf = bytearray(raw[8 + n + a:8 + n + b])
            out[k] = torch.frombuffer(buf, dtype=DT[v["dtype"]]).view(v["shape"]).clone()
    return out


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_logits(cfg, W, ids):
    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = cfg.get("head_dim") or H // nh
    eps = cfg["rms_norm_eps"]
    T = ids.shape[1]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) **
                      (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    pos = torch.arange(T)[None].float()
    freqs = (inv_freq[None, :, None] @ pos[:, None, :]).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(1, T, nh, hd).transpose(1, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(1, T, nkv, hd).transpose(1, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(1, T, nkv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = nh // nkv
        k = k[:, :, None].expand(1, nkv, rep, T, hd).reshape(1, nh, T, hd)
        v = v[:, :, None].expand(1, nkv, rep, T, hd).reshape(1, nh, T, hd)
        a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(hd) + mask, dim=-1) @ v
        x = x + a.transpose(1, 2).reshape(1, T, -1) @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(h @ W[p + "mlp.gate_proj.weight"].T) *
                 (h @ W[p + "mlp.up_proj.weight"].T)) @ W[p + "mlp.down_proj.weight"].T
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return (rms(x, W["model.norm.weight"]) @ head.T)[0]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    d, refp = sys.argv[1], sys.argv[2]
    with open(d + "/config.json") as f:
        cfg = json.load(f)
    W = {k: v.float() for k, v in read_st(d + "/model.safetensors").items()}
    tol = 1e-3 if cfg.get("torch_dtype", "float32") == "float32" else 0.3
    ref, worst = read_st(refp), 0.0
    with torch.no_grad():
        for i in range(16):
            if f"tokens.{i}" not in ref:
                break
            ids = ref[f"tokens.{i}"].long()[None]
            diff = (llama_logits(cfg, W, ids) - ref[f"logits.{i}"]).abs().max().item()
            worst = max(worst, diff)
            print(f"input {i} ({ids.shape[1]} tokens): max |transformers-style - reference| = {diff:.2e}")
    print(f"worst {worst:.2e} (limit {tol:g})")
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
