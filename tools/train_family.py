#!/usr/bin/python3
"""Train scdb's reference model family and export it for the C side.

The family (all the same Llama-style architecture, byte vocabulary):

  base      trained from scratch on general English text
            (Debian packages: fortunes, doc-debian, base-files' common-licenses)
  code      base, fully fine-tuned on C headers
            (Debian packages: libc6-dev, linux-libc-dev: /usr/include)
  manpages  base, LoRA fine-tuned (merged into the weights) on troff man page
            sources (Debian packages: manpages, manpages-dev: man2, man3)
  python    base, fully fine-tuned, long and hard, on Python sources
            (Debian package libpython3.11-stdlib: /usr/lib/python3.11);
            added later: `--only python` trains it alone and leaves the
            other three models' files untouched

and, `--stage adapters`, a fleet of LoRA adapters over base (Hugging Face
PEFT layout), one per text domain of tools/evict_suite.py's (shell, perl,
changelogs, C sources, Vim script, Python packages, man sections 1 / 5 / 8,
HTML, CMake, prose, C headers), none trained on a file of the eviction suite,
of the family or of any held-out text (the rule is at ADAPTERS below).

Outputs (relative to --out, default data/):

  models/<name>/model.safetensors   f32 weights, names as in schema/FORMATS.md
  models/<name>/config.json         architecture + provenance
  models/<name>/reference_logits.safetensors
                                    tokens and logits of fixed held-out inputs,
                                    checked by the C model's test
  heldout/<domain>.txt              held-out text (files never trained on)
  models/TRAINING.json              corpus files used / held out, losses, timing
  adapters/<name>/adapter_config.json, adapter_model.safetensors (F16),
                   training.json    --stage adapters: one LoRA adapter per
                                    domain, its bpb vs base, raw-reuse cost
  adapters/TRAINING.json            the adapters' rule, files and figures
  heldout/<name>.txt                each adapter's held-out text (32 KiB)

Held-out files are chosen by a deterministic hash of their path
(crc32(path) % 10 == 0), plus named fortune files for English, so anyone can
recompute the split.  CPU only, fixed seeds.  Run from the repository root:

  /usr/bin/python3 tools/train_family.py            # full family (~60 min)
  /usr/bin/python3 tools/train_family.py --quick    # smoke run, tiny steps
  /usr/bin/python3 tools/train_family.py --only python
      # only the python specialist, from the committed base; the held-out
      # texts of the other domains are read from data/heldout/, and
      # TRAINING.json gains the python entries (nothing else changes)
  nice -n 5 /usr/bin/python3 tools/train_family.py --stage adapters \
      --ckpt-dir /tmp/ckpt        # every adapter without a training.json
                                  # yet (~6 min each here), resumable
  /usr/bin/python3 tools/train_family.py --stage adapters --quick --out /tmp/x
      # smoke run: two adapters, 4 steps, into /tmp/x
  /usr/bin/python3 tools/check_adapters.py   # PEFT files vs the figures

Every specialist's raw-reuse cost (perplexity of its continuation when it
reads base's KV of the prefix instead of its own, vs its own prefill) is
measured in PyTorch on held-out windows and recorded in its training.json.
"""
import argparse
import glob
import gzip
import json
import math
import os
import struct
import subprocess
import sys
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    arch="llama",
    vocab_size=256,
    d_model=128,
    n_layers=8,
    n_heads=4,
    n_kv_heads=2,
    head_dim=32,
    d_ff=384,
    max_seq_len=512,
    rope_theta=10000.0,
    norm_eps=1e-5,
)

# ---------------------------------------------------------------- corpora

ENGLISH_HELDOUT_FORTUNES = ("wisdom", "literature")


def read_any(path):
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    return data


def is_heldout(path):
    return zlib.crc32(path.encode()) % 10 == 0


def english_files():
    """fortunes, base-files (common-licenses), doc-debian"""
    files = []
    for p in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if os.path.isfile(p) and not p.endswith((".dat", ".u8")):
            files.append(p)
    files += sorted(p for p in glob.glob("/usr/share/common-licenses/*")
                    if os.path.isfile(p) and not os.path.islink(p))
    files += sorted(p for p in glob.glob("/usr/share/doc/debian/*.txt*")
                    if os.path.isfile(p))
    held = [p for p in files
            if os.path.basename(p) in ENGLISH_HELDOUT_FORTUNES or is_heldout(p)]
    train = [p for p in files if p not in held]
    return train, held


def code_files():
    """libc6-dev, linux-libc-dev and other -dev packages: /usr/include/**/*.h"""
    files = sorted(p for p in glob.glob("/usr/include/**/*.h", recursive=True)
                   if os.path.isfile(p) and not os.path.islink(p))
    held = [p for p in files if is_heldout(p)]
    train = [p for p in files if not is_heldout(p)]
    return train, held


def manpage_files():
    """manpages, manpages-dev: troff sources in /usr/share/man/man2, man3"""
    files = sorted(p for p in glob.glob("/usr/share/man/man2/*.gz") +
                   glob.glob("/usr/share/man/man3/*.gz")
                   if os.path.isfile(p) and not os.path.islink(p))
    # many man3 pages are one-line ".so" redirects: keep real pages only
    files = [p for p in files if len(read_any(p)) > 400]
    held = [p for p in files if is_heldout(p)]
    train = [p for p in files if not is_heldout(p)]
    return train, held


def python_files():
    """libpython3.11-stdlib: the Python standard library, /usr/lib/python3.11/**/*.py"""
    files = sorted(p for p in glob.glob("/usr/lib/python3.11/**/*.py", recursive=True)
                   if os.path.isfile(p) and not os.path.islink(p) and
                   "-packages/" not in p)
    held = [p for p in files if is_heldout(p)]
    train = [p for p in files if not is_heldout(p)]
    return train, held


def load_corpus(paths, limit):
    parts, total = [], 0
    for p in paths:
        d = read_any(p)
        parts.append(d)
        total += len(d)
        if total >= limit:
            break
    blob = b"\n".join(parts)[:limit]
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).long(), paths[:len(parts)]


DOMAINS = {
    "english": english_files,
    "code": code_files,
    "manpages": manpage_files,
    "python": python_files,
}

FAMILY = ("base", "code", "manpages", "python")   # training order

# ---------------------------------------------------------------- model


def rope_tables(n, head_dim, theta):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(n).float()
    ang = torch.outer(t, inv)  # [n, head_dim/2]
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    # x: [B, H, T, D]; rotate pairs (i, i + D/2)  ("rotate_half" convention)
    d2 = x.shape[-1] // 2
    x1, x2 = x[..., :d2], x[..., d2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update; merge() folds it in."""

    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features))
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))
        self.scale = alpha / rank

    def forward(self, x):
        return self.base(x) + (x @ self.A.t() @ self.B.t()) * self.scale

    def merged(self):
        lin = nn.Linear(self.base.in_features, self.base.out_features, bias=False)
        with torch.no_grad():
            lin.weight.copy_(self.base.weight + self.scale * (self.B @ self.A))
        return lin


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["d_model"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["n_heads"], c["n_kv_heads"], hd
        self.attention_norm = RMSNorm(d, c["norm_eps"])
        self.wq = nn.Linear(d, self.nh * hd, bias=False)
        self.wk = nn.Linear(d, self.nkv * hd, bias=False)
        self.wv = nn.Linear(d, self.nkv * hd, bias=False)
        self.wo = nn.Linear(self.nh * hd, d, bias=False)
        self.ffn_norm = RMSNorm(d, c["norm_eps"])
        self.w1 = nn.Linear(d, c["d_ff"], bias=False)
        self.w3 = nn.Linear(d, c["d_ff"], bias=False)
        self.w2 = nn.Linear(c["d_ff"], d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        h = self.attention_norm(x)
        q = self.wq(h).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = self.wk(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = self.wv(h).view(B, T, self.nkv, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        o = F.softmax(att, dim=-1) @ v
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, -1))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c["vocab_size"], c["d_model"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.norm = RMSNorm(c["d_model"], c["norm_eps"])
        self.output = nn.Linear(c["d_model"], c["vocab_size"], bias=False)
        cos, sin = rope_tables(c["max_seq_len"], c["head_dim"], c["rope_theta"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        for b in self.layers:  # scaled residual init (GPT-2)
            nn.init.normal_(b.wo.weight, std=0.02 / math.sqrt(2 * c["n_layers"]))
            nn.init.normal_(b.w2.weight, std=0.02 / math.sqrt(2 * c["n_layers"]))

    def forward(self, idx):
        T = idx.shape[1]
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.tok_embeddings(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.layers:
            x = b(x, cos, sin, mask)
        return self.output(self.norm(x))


LINEARS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")


def add_lora(model, rank, alpha, targets=LINEARS):
    for p in model.parameters():
        p.requires_grad_(False)
    for b in model.layers:
        for n in targets:
            setattr(b, n, LoRALinear(getattr(b, n), rank, alpha))


def merge_lora(model):
    for b in model.layers:
        for n in LINEARS:
            m = getattr(b, n)
            if isinstance(m, LoRALinear):
                setattr(b, n, m.merged())

# ---------------------------------------------------------------- raw reuse


@torch.no_grad()
def forward_kv(model, idx, past=None):
    """Forward idx [1, T] after an optional prefix cache past = [(k, v)] per
    layer (k after RoPE, [1, n_kv_heads, P, head_dim]); returns the logits
    and this call's (k, v) per layer, the same states the C model caches."""
    P = past[0][0].shape[2] if past else 0
    T = idx.shape[1]
    cos, sin = model.cos[P:P + T], model.sin[P:P + T]
    mask = torch.full((T, P + T), float("-inf")).triu(P + 1)
    x = model.tok_embeddings(idx)
    kvs = []
    for li, b in enumerate(model.layers):
        h = b.attention_norm(x)
        q = b.wq(h).view(1, T, b.nh, b.hd).transpose(1, 2)
        k = b.wk(h).view(1, T, b.nkv, b.hd).transpose(1, 2)
        v = b.wv(h).view(1, T, b.nkv, b.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kvs.append((k, v))
        if past:
            k = torch.cat([past[li][0], k], dim=2)
            v = torch.cat([past[li][1], v], dim=2)
        rep = b.nh // b.nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(b.hd) + mask
        o = F.softmax(att, dim=-1) @ v
        x = x + b.wo(o.transpose(1, 2).reshape(1, T, -1))
        h = b.ffn_norm(x)
        x = x + b.w2(F.silu(b.w1(h)) * b.w3(h))
    return model.output(model.norm(x)), kvs


@torch.no_grad()
def raw_reuse_cost(base, spec, text, prefixes=(192, 384), cont=64, windows=8):
    """RAW REUSE, as `scdb bench quality` measures it: windows spread over
    the SECOND half of the held-out text, PREFIX tokens then CONT tokens (+1
    target); the specialist continues teacher-forced from (a) its own
    prefill of the prefix (oracle) and (b) base's KV of the prefix (raw).
    Returns {prefix: {oracle_ppl, raw_ppl, raw_vs_oracle, kl, top1}}."""
    base.eval()
    spec.eval()
    half = text[text.numel() // 2:]
    out = {}
    for P in prefixes:
        need = P + cont + 1
        span = half.numel() - need
        nll = {"oracle": 0.0, "raw": 0.0}
        kl, top1, n = 0.0, 0, 0
        for w in range(windows):
            off = span * w // (windows - 1) if windows > 1 else 0
            x = half[off:off + need].unsqueeze(0)
            _, kv_base = forward_kv(base, x[:, :P])
            _, kv_own = forward_kv(spec, x[:, :P])
            lo, _ = forward_kv(spec, x[:, P:P + cont], kv_own)
            lr, _ = forward_kv(spec, x[:, P:P + cont], kv_base)
            y = x[0, P + 1:P + cont + 1]
            lpo, lpr = F.log_softmax(lo[0], -1), F.log_softmax(lr[0], -1)
            nll["oracle"] += F.nll_loss(lpo, y, reduction="sum").item()
            nll["raw"] += F.nll_loss(lpr, y, reduction="sum").item()
            kl += (lpo.exp() * (lpo - lpr)).sum().item()
            top1 += (lpo.argmax(-1) == lpr.argmax(-1)).sum().item()
            n += cont
        po, pr = math.exp(nll["oracle"] / n), math.exp(nll["raw"] / n)
        out[P] = {"oracle_ppl": round(po, 4), "raw_ppl": round(pr, 4),
                  "raw_vs_oracle": round(pr / po - 1.0, 4),
                  "kl": round(kl / n, 4), "top1": round(top1 / n, 4)}
    spec.train()
    return out

# ---------------------------------------------------------------- export


def state_tensors(model):
    t = {"tok_embeddings.weight": model.tok_embeddings.weight,
         "norm.weight": model.norm.weight, "output.weight": model.output.weight}
    for i, b in enumerate(model.layers):
        p = f"layers.{i}."
        t[p + "attention_norm.weight"] = b.attention_norm.weight
        t[p + "ffn_norm.weight"] = b.ffn_norm.weight
        for n, name in (("wq", "attention.wq"), ("wk", "attention.wk"),
                        ("wv", "attention.wv"), ("wo", "attention.wo"),
                        ("w1", "feed_forward.w1"), ("w2", "feed_forward.w2"),
                        ("w3", "feed_forward.w3")):
            t[p + name + ".weight"] = getattr(b, n).weight
    return {k: v.detach().float().contiguous() for k, v in t.items()}


def write_safetensors(path, tensors, metadata=None):
    """Minimal safetensors writer (little-endian, 8-byte aligned header)."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        if t.dtype == torch.float32:
            dt, raw = "F32", t.numpy().astype("<f4").tobytes()
        elif t.dtype == torch.float16:
            dt, raw = "F16", t.numpy().astype("<f2").tobytes()
        elif t.dtype == torch.int32:
            dt, raw = "I32", t.numpy().astype("<i4").tobytes()
        else:
            raise ValueError(f"unsupported dtype {t.dtype}")
        header[name] = {"dtype": dt, "shape": list(t.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)

# ---------------------------------------------------------------- training


def batches(data, batch, seq, gen):
    n = data.numel() - seq - 1
    while True:
        ix = torch.randint(0, n, (batch,), generator=gen)
        x = torch.stack([data[i:i + seq + 1] for i in ix.tolist()])
        yield x[:, :-1], x[:, 1:]


@torch.no_grad()
def eval_bpb(model, data, seq=512, max_windows=16):
    model.eval()
    tot, cnt = 0.0, 0
    nwin = min(max_windows, (data.numel() - 1) // seq)
    for w in range(nwin):
        x = data[w * seq:(w + 1) * seq + 1].unsqueeze(0)
        logits = model(x[:, :-1])
        tot += F.cross_entropy(logits.view(-1, 256), x[:, 1:].reshape(-1),
                               reduction="sum").item()
        cnt += seq
    model.train()
    return tot / cnt / math.log(2)


def train(model, data, steps, lr, batch, seq, seed, log, label, warmup=50,
          weight_decay=0.01, probe=None, probe_every=0, ckpt=None, ckpt_every=50,
          short_frac=0.85):
    """AdamW with warmup + cosine decay.  The first 85% (short_frac) of the
    steps use sequences of seq/2 tokens (batch*2 of them: cheaper attention,
    same tokens per step); the rest use the full context so every position up
    to max_seq_len is trained.  probe (optional): called every probe_every
    steps and after the last; what it returns is logged (it must not touch
    the RNG of the batches).  ckpt (optional): a file where the trainable
    parameters, the optimizer, the batch RNG, the losses and the log are
    saved every ckpt_every steps; a run that finds it goes on from there, so
    a killed run resumes where it was (the same batches, the same steps)."""
    gen = torch.Generator().manual_seed(seed)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    short = batches(data, batch * 2, seq // 2, gen)
    full = batches(data, batch, seq, gen)
    long_from = int(steps * short_frac)
    t0 = time.time()
    losses = []
    first = 0
    if ckpt and os.path.exists(ckpt):
        st = torch.load(ckpt)
        if st["steps"] != steps or st["lr"] != lr or st["seed"] != seed:
            raise SystemExit(f"{ckpt}: a checkpoint of another run ({st['steps']} steps, "
                             f"lr {st['lr']}, seed {st['seed']}); remove it")
        with torch.no_grad():
            for n, p in named:
                p.copy_(st["params"][n])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        first, losses = st["step"], st["losses"]
        log[:] = st["log"]
        t0 -= st["seconds"]
        print(f"[{label}] resumed from {ckpt} at step {first}", flush=True)
    model.train()
    for step in range(first, steps):
        cur = lr * min(1.0, (step + 1) / warmup) * \
            (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = cur
        x, y = next(short if step < long_from else full)
        loss = F.cross_entropy(model(x).view(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == steps - 1:
            el = time.time() - t0
            eta = el / (step + 1) * (steps - step - 1)
            msg = (f"[{label}] step {step + 1}/{steps} loss {loss.item():.4f} "
                   f"lr {cur:.2e} {el:.0f}s elapsed, eta {eta:.0f}s")
            print(msg, flush=True)
            log.append(msg)
        if probe and ((probe_every and (step + 1) % probe_every == 0) or step == steps - 1):
            msg = f"[{label}] step {step + 1}: {probe()}"
            print(msg, flush=True)
            log.append(msg)
        if ckpt and ((step + 1) % ckpt_every == 0 or step == steps - 1):
            tmp = ckpt + ".tmp"
            torch.save({"steps": steps, "lr": lr, "seed": seed, "step": step + 1,
                        "params": {n: p.detach().clone() for n, p in named},
                        "opt": opt.state_dict(), "gen": gen.get_state(),
                        "losses": losses, "log": list(log),
                        "seconds": time.time() - t0}, tmp)
            os.replace(tmp, ckpt)
    return losses, time.time() - t0


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        dt = {"F32": torch.float32, "F16": torch.float16}[v["dtype"]]
        out[k] = torch.frombuffer(buf, dtype=dt).view(v["shape"]).float().clone()
    return out


def load_exported(model, path):
    t = read_safetensors(path)
    sd = {"tok_embeddings.weight": t["tok_embeddings.weight"],
          "norm.weight": t["norm.weight"], "output.weight": t["output.weight"]}
    for i in range(model.c["n_layers"]):
        p = f"layers.{i}."
        sd[p + "attention_norm.weight"] = t[p + "attention_norm.weight"]
        sd[p + "ffn_norm.weight"] = t[p + "ffn_norm.weight"]
        for n, name in (("wq", "attention.wq"), ("wk", "attention.wk"),
                        ("wv", "attention.wv"), ("wo", "attention.wo"),
                        ("w1", "feed_forward.w1"), ("w2", "feed_forward.w2"),
                        ("w3", "feed_forward.w3")):
            sd[p + n + ".weight"] = t[p + name + ".weight"]
    model.load_state_dict(sd)


def prepare(a, domains=None):
    """Load corpora, write held-out texts, return (corpora, held, domain report).
    domains: the domains to build from the Debian files (default all); the
    held-out texts of the others are read back from OUT/heldout/<domain>.txt
    as committed, so training one new model never rewrites them."""
    corpora, held, rep = {}, {}, {}
    for dom, fn in DOMAINS.items():
        if domains is not None and dom not in domains:
            path = os.path.join(a.out, "heldout", dom + ".txt")
            with open(path, "rb") as f:
                held[dom] = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
            continue
        tr, he = fn()
        if not tr or not he:
            raise SystemExit(f"domain {dom}: no training or held-out files "
                             f"({fn.__doc__}); run scripts/install-deps.sh --train")
        corpora[dom], used = load_corpus(tr, 8 << 20)
        heldtext = b"\n".join(read_any(p) for p in he)[:96 << 10]
        held[dom] = torch.frombuffer(bytearray(heldtext), dtype=torch.uint8).long()
        os.makedirs(os.path.join(a.out, "heldout"), exist_ok=True)
        with open(os.path.join(a.out, "heldout", dom + ".txt"), "wb") as f:
            f.write(heldtext)
        assert not set(used) & set(he), "held-out file in training set"
        rep[dom] = {"package_paths": fn.__doc__, "train_files": used,
                    "heldout_files": he, "train_bytes": int(corpora[dom].numel()),
                    "heldout_bytes": len(heldtext)}
    return corpora, held, rep


# reference logits for the C test: fixed slices of held-out text (domain,
# length); the python slice exists only where that domain does
REFERENCE_INPUTS = (("english", 200), ("code", 512), ("manpages", 77), ("python", 128))


def finish(a, name, model, held, extra):
    d = os.path.join(a.out, "models", name)
    os.makedirs(d, exist_ok=True)
    model.eval()
    write_safetensors(os.path.join(d, "model.safetensors"), state_tensors(model),
                      {"format": "scdb-model", "name": name})
    cfg = dict(CONFIG, name=name, **extra)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    refs = {}
    with torch.no_grad():
        inputs = [(dom, n) for dom, n in REFERENCE_INPUTS if dom in held]
        for i, (dom, n) in enumerate(inputs):
            toks = held[dom][1000:1000 + n].unsqueeze(0)
            refs[f"tokens.{i}"] = toks[0].to(torch.int32)
            refs[f"logits.{i}"] = model(toks)[0].float()
    write_safetensors(os.path.join(d, "reference_logits.safetensors"), refs,
                      {"format": "scdb-reference-logits", "model": name,
                       "count": len(inputs)})
    bpb = {dom: round(eval_bpb(model, held[dom]), 4) for dom in DOMAINS if dom in held}
    print(f"[{name}] held-out bpb (torch): " +
          ", ".join(f"{k} {v:.3f}" for k, v in bpb.items()), flush=True)
    with open(os.path.join(d, "training.json"), "w") as f:
        json.dump(dict(extra, heldout_bpb_torch=bpb), f, indent=1)
        f.write("\n")


def avg_tail(losses):
    return round(sum(losses[-20:]) / len(losses[-20:]), 4)


def load_model(path):
    m = Model(CONFIG)
    load_exported(m, path)
    return m


def stage(a, which):
    torch.set_num_threads(a.threads)
    corpora, held, _ = prepare(a, ("python",) if which == "python" else None)
    log = []
    if which == "base":
        torch.manual_seed(1234)
        m = Model(CONFIG)
        print(f"model: {sum(p.numel() for p in m.parameters())} parameters", flush=True)
        losses, secs = train(m, corpora["english"], a.base_steps, 3e-3, a.batch,
                             a.seq, 1, log, "base")
        finish(a, "base", m, held, {"domain": "english", "parent": None,
               "finetune": "pretrain", "steps": a.base_steps, "lr": 3e-3,
               "train_seconds": round(secs, 1), "final_loss": avg_tail(losses)})
        return
    base_path = os.path.join(a.out, "models", "base", "model.safetensors")
    torch.manual_seed(1234 + len(which))
    m = Model(CONFIG)
    load_exported(m, base_path)
    if which == "code":
        # full fine-tune, long and hard so that drift from base is real
        losses, secs = train(m, corpora["code"], a.code_steps, 3e-3, a.batch,
                             a.seq, 2, log, "code", warmup=20)
        finish(a, "code", m, held, {"domain": "code", "parent": "base",
               "finetune": "full", "steps": a.code_steps, "lr": 3e-3,
               "train_seconds": round(secs, 1), "final_loss": avg_tail(losses)})
    elif which == "manpages":
        # LoRA rank 16 on every linear of every layer, merged into the weights
        add_lora(m, rank=16, alpha=32)
        losses, secs = train(m, corpora["manpages"], a.lora_steps, 4e-3, a.batch,
                             a.seq, 3, log, "manpages", warmup=20)
        merge_lora(m)
        finish(a, "manpages", m, held, {"domain": "manpages", "parent": "base",
               "finetune": "lora-merged", "lora_rank": 16, "lora_alpha": 32,
               "steps": a.lora_steps, "lr": 4e-3,
               "train_seconds": round(secs, 1), "final_loss": avg_tail(losses)})
    else:
        # full fine-tune, harder than code: a high learning rate, stronger
        # weight decay, and warm restarts (each pass a fresh AdamW with its
        # own warmup + cosine): raw reuse of base's KV must cost this
        # specialist >= +10% perplexity on Python, and the cost grows while
        # the learning rate is high, then levels off as it decays
        base = load_model(base_path)
        probe = lambda: {P: (r["raw_vs_oracle"], r["top1"])
                         for P, r in raw_reuse_cost(base, m, held["python"], windows=8).items()}
        passes, secs, done = [], 0.0, []
        if a.python_resume:
            # the model a run with the same first passes wrote (weights are
            # f32 and each pass starts a fresh optimizer and batch stream,
            # so going on from it is exactly what one run would do)
            load_exported(m, os.path.join(a.python_resume, "model.safetensors"))
            with open(os.path.join(a.python_resume, "training.json")) as f:
                prev = json.load(f)
            want = [{"steps": n, "lr": lr} for n, lr in a.python_passes]
            if (prev.get("weight_decay") != a.python_wd or not prev.get("passes") or
                    prev["passes"] != want[:len(prev["passes"])]):
                raise SystemExit(f"--python-resume: {a.python_resume} was trained with passes "
                                 f"{prev.get('passes')}, weight decay {prev.get('weight_decay')}: "
                                 f"not the first passes of {want}, weight decay {a.python_wd}")
            done = [dict(p, seconds=t) for p, t in zip(prev["passes"], prev["pass_seconds"])]
            secs += sum(prev["pass_seconds"])
            log += prev.get("log", [])
        for pi, (steps, lr) in enumerate(a.python_passes):
            if pi < len(done):
                continue
            losses, t = train(m, corpora["python"], steps, lr, a.batch, a.seq, 4 + pi, log,
                              f"python pass {pi + 1}", warmup=20, weight_decay=a.python_wd,
                              probe=probe, probe_every=a.probe_every)
            secs += t
            done.append({"steps": steps, "lr": lr, "seconds": round(t, 1)})
        finish(a, "python", m, held, {"domain": "python", "parent": "base",
               "finetune": "full", "steps": sum(p["steps"] for p in done),
               "lr": max(p["lr"] for p in done), "weight_decay": a.python_wd,
               "passes": [{"steps": p["steps"], "lr": p["lr"]} for p in done],
               "pass_seconds": [p["seconds"] for p in done],
               "resumed_from_pass_1": bool(a.python_resume),
               "train_seconds": round(secs, 1), "final_loss": avg_tail(losses)})
    if which != "base":
        # the figure SCD exists for: what reading base's KV costs this model
        m.eval()
        base = load_model(base_path)
        rr = raw_reuse_cost(base, m, held[which], windows=16)
        base_bpb = round(eval_bpb(base, held[which]), 4)
        print(f"[{which}] raw reuse vs oracle: " + ", ".join(
            f"prefix {P}: {100 * r['raw_vs_oracle']:+.1f}% (KL {r['kl']:.3f}, top-1 "
            f"{r['top1']:.3f})" for P, r in rr.items()), flush=True)
        tj = os.path.join(a.out, "models", which, "training.json")
        with open(tj) as f:
            info = json.load(f)
        info["base_heldout_bpb_torch"] = base_bpb
        info["raw_reuse"] = {"text": f"second half of heldout/{which}.txt",
                             "windows": 16, "continuation": 64,
                             "by_prefix": {str(P): r for P, r in rr.items()}}
        info["log"] = [l for l in log if ": {" in l]
        with open(tj, "w") as f:
            json.dump(info, f, indent=1)
            f.write("\n")


def add_python_report(a, t0):
    """--only python: add the python domain and model to TRAINING.json and
    leave every other entry as it is."""
    _, _, rep = prepare(a, ("python",))
    path = os.path.join(a.out, "models", "TRAINING.json")
    with open(path) as f:
        report = json.load(f)
    report["domains"]["python"] = rep["python"]
    with open(os.path.join(a.out, "models", "python", "training.json")) as f:
        report["models"]["python"] = json.load(f)
    report["models"]["python"]["args"] = {
        "only": "python", "python_passes": a.python_passes,
        "python_wd": a.python_wd, "python_resume": a.python_resume, "batch": a.batch, "seq": a.seq, "threads": a.threads,
        "torch": torch.__version__, "seconds": round(time.time() - t0, 1)}
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


# ---------------------------------------------------------------- adapter fleet
#
# `--stage adapters`: LoRA adapters over base, one per text domain, written in
# Hugging Face PEFT's layout (data/adapters/<name>/adapter_config.json +
# adapter_model.safetensors, F16) for scdb's adapter loader and the fleet
# bench.  The domains are tools/evict_suite.py's (same globs, the same Debian
# files, each as its package shipped it); what is new is the split:
#
#   * a candidate is never a file of the eviction suite (any portion of
#     data/evict_suite/manifest.json), nor one the model family trained or
#     held out on (data/models/TRAINING.json), nor under evict_suite's
#     excluded prefixes; a file belongs to the first domain that lists it;
#   * held out: crc32("adapter:" + path) % 10 == 0; the held-out text
#     data/heldout/<name>.txt is cut from those files by evict_suite's rule
#     (4 KiB from the middle of each, in crc32("order:" + path) order, at most
#     6 files a package) to 32 KiB;
#   * trained on: the other candidates, in the same order, at most 32 KiB
#     from the start of each, until the text reaches 2 MiB.
#
# data/adapters/TRAINING.json records the rule, every adapter's training and
# held-out files, and each adapter's training.json.

# adapter name -> evict_suite domain (the evict suite's `python` is
# dist-packages; the family's python model and data/heldout/python.txt are the
# standard library's, hence `pylib` here).  Training order: the first twelve
# are the fleet; the last one is trained when time allows.  evict_suite's
# `config` is not among them: once the suite's files are out, its 132
# candidates leave no held-out file of 512 bytes or more as shipped.
ADAPTERS = (("shell", "shell"), ("perl", "perl"), ("changelog", "changelog"),
            ("c-source", "c-source"), ("vim", "vim"), ("pylib", "python"), ("man5", "man5"),
            ("man8", "man8"), ("html", "html"), ("cmake", "cmake"), ("prose", "prose"),
            ("man1", "man1"), ("c-header", "c-header"))
# LoRA shape per adapter: (rank, family linears, peak learning rate).  Most
# adapt the K and V projections only (rank 16): all that they learn reaches
# the KV cache, which is what makes reading base's KV cost them.  With all
# seven projections, most of what an adapter learns sits in the MLP and the
# query / output projections, which a continuation runs itself: on perl,
# 100 steps at 2e-2 cost raw reuse +1.1% / +1.8% perplexity (prefix 192 /
# 384) with all seven at rank 8, +1.4% / +3.3% with q, k, v, o at rank 16.
# Two adapters adapt q, k, v, o and three all seven, so the fleet also has
# the shapes PEFT users usually ship.
KV_ONLY = ("wk", "wv")
ATTN = ("wq", "wk", "wv", "wo")
ADAPTER_SHAPE = {"html": (16, ATTN, 2e-2), "cmake": (16, ATTN, 2e-2),
                 "prose": (8, LINEARS, 2e-2), "man1": (8, LINEARS, 2e-2),
                 "c-header": (8, LINEARS, 2e-2)}
DEFAULT_SHAPE = (16, KV_ONLY, 3e-2)
PEFT_TARGETS = (("wq", "self_attn.q_proj"), ("wk", "self_attn.k_proj"),
                ("wv", "self_attn.v_proj"), ("wo", "self_attn.o_proj"),
                ("w1", "mlp.gate_proj"), ("w3", "mlp.up_proj"), ("w2", "mlp.down_proj"))
ADAPTER_HELDOUT_BYTES = 32 << 10
ADAPTER_TRAIN_BYTES = 2 << 20
ADAPTER_FILE_CAP = 32 << 10
ADAPTER_RULE_VERSION = 1


def adapter_is_heldout(path):
    return zlib.crc32(("adapter:" + path).encode()) % 10 == 0


def adapter_selection(repo):
    """{name: {what, evict_domain, train_files: [{path, package, bytes}],
    heldout_files: [evict_suite.cut records], ...}} and {name: held-out text}
    for every adapter of ADAPTERS, by the rule above."""
    sys.path.insert(0, os.path.join(repo, "tools"))
    import evict_suite as es
    own = es.owners()
    allowed = es.project_packages(repo)
    own = {p: o for p, o in own.items() if o[0] in allowed}
    es.OWNED[:] = sorted(own)
    es.MD5.update(es.shipped_md5())
    banned = es.training_files(repo)
    with open(os.path.join(repo, "data", "evict_suite", "manifest.json")) as f:
        for d in json.load(f)["domains"]:
            for part in d["portions"].values():
                banned |= {x["path"] for x in part["files"]}
    by_dom = {name: (what, fn) for name, _, what, fn in es.DOMAINS}
    owner = {}        # path -> the first adapter whose domain lists it
    cands = {}
    for name, dom in ADAPTERS:
        what, fn = by_dom[dom]
        c = []
        for p in sorted(set(fn())):
            if (p in owner or p in banned or p not in own or p.startswith(es.EXCLUDE_PREFIXES)
                    or not os.path.isfile(p) or os.path.islink(p)):
                continue
            owner[p] = name
            c.append(p)
        cands[name] = c
    sel, texts, used = {}, {}, set()
    for name, dom in ADAPTERS:
        held = [p for p in cands[name] if adapter_is_heldout(p)]
        text, hfiles = es.cut(held, ADAPTER_HELDOUT_BYTES, own, used)
        train, total = [], 0
        for p in sorted((p for p in cands[name] if not adapter_is_heldout(p)),
                        key=es.order_key):
            if total >= ADAPTER_TRAIN_BYTES:
                break
            data = es.read_any(p)
            if data is None or len(data) < es.MIN_BYTES or not es.is_text(data):
                continue
            n = min(len(data), ADAPTER_FILE_CAP, ADAPTER_TRAIN_BYTES - total)
            train.append({"path": p, "package": own[p][0], "version": own[p][1], "bytes": n})
            total += n + 1
        assert not {x["path"] for x in train} & {x["path"] for x in hfiles}
        sel[name] = {"what": by_dom[dom][0], "evict_domain": dom,
                     "candidates": len(cands[name]), "train_bytes": total,
                     "heldout_bytes": len(text), "train_files": train,
                     "heldout_files": hfiles}
        texts[name] = text
        print(f"[adapters] {name:10s} {len(cands[name]):5d} candidates, train "
              f"{total} B from {len(train)} files, held out {len(text)} B from "
              f"{len(hfiles)} files", flush=True)
    return sel, texts


def adapter_corpus(repo, entry):
    """The training text of one adapter, re-read from its recorded files (each
    as its package shipped it: a file changed since the selection is refused)."""
    sys.path.insert(0, os.path.join(repo, "tools"))
    import evict_suite as es
    if not es.MD5:
        es.MD5.update(es.shipped_md5())
    parts = []
    for x in entry["train_files"]:
        d = es.read_any(x["path"])
        if d is None or len(d) < x["bytes"]:
            raise SystemExit(f"{x['path']}: not as its package shipped it any more; "
                             f"reselect with --reselect")
        parts.append(d[:x["bytes"]])
    blob = b"\n".join(parts)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).long()


def peft_tensors(model):
    """The LoRA factors of a model with LoRALinear layers, PEFT's names, F16."""
    t = {}
    for i, b in enumerate(model.layers):
        for n, hf in PEFT_TARGETS:
            m = getattr(b, n)
            if not isinstance(m, LoRALinear):
                continue
            p = f"base_model.model.model.layers.{i}.{hf}."
            t[p + "lora_A.weight"] = m.A.detach().to(torch.float16).contiguous()
            t[p + "lora_B.weight"] = m.B.detach().to(torch.float16).contiguous()
    return t


def peft_config(rank, alpha, targets):
    return {"peft_type": "LORA", "base_model_name_or_path": "base", "r": rank,
            "lora_alpha": alpha, "use_rslora": False,
            "target_modules": [hf.split(".")[1] for n, hf in PEFT_TARGETS if n in targets],
            "bias": "none", "fan_in_fan_out": False, "modules_to_save": None,
            "use_dora": False, "lora_dropout": 0.0, "task_type": "CAUSAL_LM",
            "inference_mode": True}


def load_peft(base_path, adapter_dir, merge=True):
    """base + the adapter in adapter_dir, read back from its PEFT files: the
    merged model (W + s*B*A per target) or, merge=False, the low-rank one
    (LoRALinear layers holding the file's A and B)."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    t = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    m = load_model(base_path)
    of_hf = {hf.split(".")[1]: n for n, hf in PEFT_TARGETS}
    targets = [of_hf[x] for x in cfg["target_modules"]]
    add_lora(m, cfg["r"], cfg["lora_alpha"], targets)
    hf_of = dict(PEFT_TARGETS)
    with torch.no_grad():
        for i, b in enumerate(m.layers):
            for n in targets:
                lm = getattr(b, n)
                p = f"base_model.model.model.layers.{i}.{hf_of[n]}."
                lm.A.copy_(t.pop(p + "lora_A.weight"))
                lm.B.copy_(t.pop(p + "lora_B.weight"))
    if t:
        raise SystemExit(f"{adapter_dir}: unexpected tensors {sorted(t)[:3]}")
    if merge:
        merge_lora(m)
    m.eval()
    return m


def adapter_stage(a):
    """Train the adapters of ADAPTERS (or --adapters) that have no
    training.json yet, one after the other."""
    torch.set_num_threads(a.threads)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    adir = os.path.join(a.out, "adapters")
    os.makedirs(adir, exist_ok=True)
    rpath = os.path.join(adir, "TRAINING.json")
    report = {}
    if os.path.exists(rpath):
        with open(rpath) as f:
            report = json.load(f)
    if a.reselect or report.get("rule_version") != ADAPTER_RULE_VERSION:
        sel, texts = adapter_selection(repo)
        report = {"rule_version": ADAPTER_RULE_VERSION, "rule": {
            "domains": "tools/evict_suite.py's DOMAINS (same globs over the files of the "
                       "packages scripts/install-deps.sh installs and their dependencies, "
                       "each as its package shipped it); adapter name -> domain: " +
                       ", ".join(f"{n} = {d}" for n, d in ADAPTERS),
            "excluded": "every file of data/evict_suite/manifest.json (all portions), every "
                        "file of data/models/TRAINING.json (trained or held out), "
                        "evict_suite's excluded prefixes; a file belongs to the first "
                        "adapter whose domain lists it",
            "heldout": f"crc32('adapter:' + path) % 10 == 0; text cut by evict_suite's rule "
                       f"to {ADAPTER_HELDOUT_BYTES} bytes: data/heldout/<name>.txt",
            "train": f"the other candidates in crc32('order:' + path) order, at most "
                     f"{ADAPTER_FILE_CAP} bytes from the start of each, joined with '\\n', "
                     f"until {ADAPTER_TRAIN_BYTES} bytes"},
            "config": CONFIG, "domains": sel, "adapters": report.get("adapters", {})}
        os.makedirs(os.path.join(a.out, "heldout"), exist_ok=True)
        for name, text in texts.items():
            with open(os.path.join(a.out, "heldout", name + ".txt"), "wb") as f:
                f.write(text)
        if not a.quick:
            with open(rpath, "w") as f:
                json.dump(report, f, indent=1)
                f.write("\n")
    names = a.adapters or [n for n, _ in ADAPTERS]
    base_path = os.path.join(a.out, "models", "base", "model.safetensors")
    if a.quick and not os.path.exists(base_path):
        base_path = os.path.join(repo, "data", "models", "base", "model.safetensors")
    for name in names:
        if name not in report["domains"]:
            raise SystemExit(f"--adapters: no adapter {name!r} (have "
                             f"{', '.join(n for n, _ in ADAPTERS)})")
        d = os.path.join(adir, name)
        if os.path.exists(os.path.join(d, "training.json")):
            print(f"[{name}] done already ({d}/training.json): skipped", flush=True)
            continue
        t0 = time.time()
        entry = report["domains"][name]
        corpus = adapter_corpus(repo, entry)
        with open(os.path.join(a.out, "heldout", name + ".txt"), "rb") as f:
            held = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
        seed = zlib.crc32(("adapter:" + name).encode()) & 0x7FFFFFFF
        torch.manual_seed(seed)
        rank, targets, lr = ADAPTER_SHAPE.get(name, DEFAULT_SHAPE)
        lr = a.adapter_lr or lr
        alpha = 2 * rank
        m = load_model(base_path)
        add_lora(m, rank, alpha, targets)
        ckpt = None
        if a.ckpt_dir and not a.quick:
            os.makedirs(a.ckpt_dir, exist_ok=True)
            ckpt = os.path.join(a.ckpt_dir, name + ".pt")
        log = []
        losses, secs = train(m, corpus, a.adapter_steps, lr, a.adapter_batch,
                             a.seq, seed, log, name, warmup=20, weight_decay=0.0,
                             ckpt=ckpt, ckpt_every=25, short_frac=a.adapter_short_frac)
        m.eval()
        # the f32 model training ended with, on the held-out text's first 16
        # windows (tools/check_adapters.py compares the shipped F16 one)
        trained_bpb = eval_bpb(m, held, max_windows=16)
        os.makedirs(d, exist_ok=True)
        write_safetensors(os.path.join(d, "adapter_model.safetensors"), peft_tensors(m),
                          {"format": "pt"})
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump(peft_config(rank, alpha, targets), f, indent=2)
            f.write("\n")
        # every figure from here on is the shipped adapter's: read back from
        # the PEFT files (F16 factors) and merged into base's f32 weights
        spec = load_peft(base_path, d)
        base = load_model(base_path)
        bpb = round(eval_bpb(spec, held, max_windows=64), 4)
        base_bpb = round(eval_bpb(base, held, max_windows=64), 4)
        rr = raw_reuse_cost(base, spec, held, windows=16)
        size = os.path.getsize(os.path.join(d, "adapter_model.safetensors"))
        info = {"name": name, "domain": entry["evict_domain"], "what": entry["what"],
                "parent": "base", "finetune": "lora", "lora_rank": rank,
                "lora_alpha": alpha,
                "target_modules": peft_config(rank, alpha, targets)["target_modules"],
                "steps": a.adapter_steps, "lr": lr, "batch": a.adapter_batch,
                "seq": a.seq, "short_frac": a.adapter_short_frac, "weight_decay": 0.0,
                "seed": seed,
                "train_bytes": int(corpus.numel()), "train_files": len(entry["train_files"]),
                "train_seconds": round(secs, 1), "seconds": round(time.time() - t0, 1),
                "final_loss": avg_tail(losses),
                "heldout": f"heldout/{name}.txt", "heldout_bytes": int(held.numel()),
                "heldout_bpb": bpb, "base_heldout_bpb": base_bpb,
                "bpb_vs_base": round(bpb / base_bpb - 1.0, 4),
                "trained_f32_bpb_16_windows": round(trained_bpb, 4),
                "adapter_bytes": size,
                "adapter_vs_base_bytes": round(size / os.path.getsize(base_path), 4),
                "raw_reuse": {"text": f"second half of heldout/{name}.txt", "windows": 16,
                              "continuation": 64,
                              "by_prefix": {str(P): r for P, r in rr.items()}},
                "torch": torch.__version__, "threads": a.threads,
                "log": log}
        with open(os.path.join(d, "training.json"), "w") as f:
            json.dump(info, f, indent=1)
            f.write("\n")
        print(f"[{name}] held-out bpb {bpb:.4f} vs base {base_bpb:.4f} "
              f"({100 * info['bpb_vs_base']:+.1f}%); raw reuse " + ", ".join(
                  f"prefix {P}: {100 * r['raw_vs_oracle']:+.1f}% (KL {r['kl']:.3f}, top-1 "
                  f"{r['top1']:.3f})" for P, r in rr.items()) +
              f"; {size} B ({100 * info['adapter_vs_base_bytes']:.1f}% of base), "
              f"{info['seconds']:.0f} s", flush=True)
        if not a.quick:
            with open(rpath) as f:
                report = json.load(f)
            report["adapters"][name] = info
            with open(rpath, "w") as f:
                json.dump(report, f, indent=1)
                f.write("\n")
            if ckpt and os.path.exists(ckpt):
                os.remove(ckpt)
    return 0


def passes_arg(s):
    """"600:1e-2,500:1e-2" -> [(600, 0.01), (500, 0.01)]"""
    try:
        out = [(int(n), float(lr)) for n, lr in (p.split(":") for p in s.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want STEPS:LR[,STEPS:LR...], not {s!r}")
    if not out or any(n < 1 or lr <= 0 for n, lr in out):
        raise argparse.ArgumentTypeError(f"steps and learning rates must be positive: {s!r}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="data")
    ap.add_argument("--quick", action="store_true", help="smoke run (few steps)")
    ap.add_argument("--stage", choices=("all", "adapters") + FAMILY,
                    default="all", help="all = base, then code and manpages in "
                    "parallel (one process and one core each), then python")
    ap.add_argument("--only", choices=FAMILY[1:], help="train this specialist alone "
                    "from the committed base and add it to TRAINING.json; no other "
                    "model's files change (only python so far)")
    ap.add_argument("--base-steps", type=int, default=600)
    ap.add_argument("--code-steps", type=int, default=450)
    ap.add_argument("--lora-steps", type=int, default=450)
    ap.add_argument("--python-passes", type=passes_arg, default="600:1e-2,600:1e-2",
                    help="python: STEPS:LR per pass, comma-separated (warm restarts)")
    ap.add_argument("--python-resume", metavar="DIR",
                    help="python: go on from the model that a run with the same "
                    "first passes wrote to DIR (its training.json says which)")
    ap.add_argument("--python-wd", type=float, default=0.1)
    ap.add_argument("--probe-every", type=int, default=100,
                    help="python: log the raw-reuse cost every N steps (0: at the end)")
    ap.add_argument("--adapters", nargs="+", metavar="NAME",
                    help="adapters stage: train these (default: every adapter of "
                    "ADAPTERS without a training.json yet; --quick: the first two)")
    ap.add_argument("--adapter-steps", type=int, default=70)
    ap.add_argument("--adapter-lr", type=float,
                    help="adapters stage: peak learning rate (default: ADAPTER_SHAPE's)")
    ap.add_argument("--adapter-batch", type=int, default=2,
                    help="adapters stage: sequences of --seq tokens a step")
    ap.add_argument("--adapter-short-frac", type=float, default=0.85,
                    help="adapters stage: the fraction of steps on half-length "
                    "sequences (the rest use --seq)")
    ap.add_argument("--ckpt-dir", metavar="DIR",
                    help="adapters stage: checkpoint each adapter's training here every "
                    "25 steps; a run that finds one goes on from it")
    ap.add_argument("--reselect", action="store_true",
                    help="adapters stage: choose the files again (and rewrite the held-out "
                    "texts) instead of reading data/adapters/TRAINING.json's choice")
    ap.add_argument("--batch", type=int, default=8, help="sequences of --seq tokens")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.quick:
        a.base_steps, a.code_steps, a.lora_steps, a.adapter_steps = 4, 4, 4, 4
        if a.stage == "adapters" and not a.adapters:
            a.adapters = [n for n, _ in ADAPTERS[:2]]
    if a.stage == "adapters":
        return adapter_stage(a)
        a.python_passes = [(4, lr) for _, lr in a.python_passes]
    if a.only:
        if a.only != "python":
            ap.error("--only: only python is trained alone (the others are the "
                     "original family; retrain it with --stage all)")
        t0 = time.time()
        stage(a, "python")
        add_python_report(a, t0)
        print(f"done in {time.time() - t0:.1f} s", flush=True)
        return 0
    if a.stage != "all":
        return stage(a, a.stage)
    t0 = time.time()
    argv = [sys.executable, os.path.abspath(__file__), "--out", a.out,
            "--base-steps", str(a.base_steps), "--code-steps", str(a.code_steps),
            "--lora-steps", str(a.lora_steps),
            "--python-passes", ",".join(f"{n}:{lr}" for n, lr in a.python_passes),
            "--python-wd", str(a.python_wd),
            "--probe-every", str(a.probe_every), "--batch", str(a.batch),
            "--seq", str(a.seq), "--threads", str(a.threads)]
    if subprocess.call(argv + ["--stage", "base"]) != 0:
        return 1
    procs = [subprocess.Popen(argv + ["--stage", s]) for s in ("code", "manpages")]
    if any(p.wait() != 0 for p in procs):
        return 1
    if subprocess.call(argv + ["--stage", "python"]) != 0:
        return 1
    _, _, rep = prepare(a)
    report = {"config": CONFIG, "torch": torch.__version__, "args": vars(a),
              "domains": rep, "models": {},
              "heldout_rule": "crc32(path) % 10 == 0, plus fortunes " +
              " and ".join(ENGLISH_HELDOUT_FORTUNES)}
    for name in FAMILY:
        with open(os.path.join(a.out, "models", name, "training.json")) as f:
            report["models"][name] = json.load(f)
    report["total_seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(a.out, "models", "TRAINING.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(f"done in {report['total_seconds']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
