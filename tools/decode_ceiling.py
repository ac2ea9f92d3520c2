#!/usr/bin/env python3
"""decode_ceiling.py — how well can ANY per-token linear decoder turn the
producer's states into a consumer's KV?  The ceiling of SCD's REUSE
decoders, measured on the model family in the torch twin of the C model
(tools/train_family.py), so that a quality goal can be checked against
what the method can reach at all.

For every consumer (the fine-tunes in data/models, the LoRA adapters in
data/adapters) and the producer `base`, least-squares decoders map, per
token, an input row to the consumer's K (pre-RoPE) and V of layers 1..L-1
(layer 0 is regenerated from the token, exactly, as scdb's TOKEN layer):

  codes        the codebook's codes of the token (every layer's, as an
               "all" pair's decoders read them): what scdb stores
  codes+tok    the same plus the consumer's own embedding of the token
               (free at decode: the consumer has the token ids)
  full+tok     the producer's complete uncompressed states H_in of every
               layer (L x d_model values) plus the token's embedding: no
               codebook at all, the best any per-token linear decoder of
               the producer's states can do

  head2        not decoding alone: the consumer recomputes its own first
               2 layers over the prefix (exact K/V there, 2/L of a
               prefill), and the decoders of the other layers read the
               codes, the token and the consumer's own residual after
               layer 2 (what a decode could do with that much compute)

and, for reference, raw reuse (the producer's KV as is).  Fitted on the
FIRST half of every domain's held-out text (data/heldout), evaluated on
windows of the SECOND half of the consumer's own domain (prefix + cont
tokens, teacher-forced): KL(own prefill || decoded) per token and top-1
agreement of the next-token argmax, as `scdb bench fleet` reports them.
No aligner, no patch layer: those are scdb's nonlinear additions on a few
layers (their effect is in bench fleet's figures).

  /usr/bin/python3 tools/decode_ceiling.py [--data DIR] [--consumers a,b]
      [--windows N] [--prefix P] [--cont C] [--json OUT] [--md OUT]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_family as tf  # noqa: E402


def windows(path, half, n, win):
    b = open(path, "rb").read()
    b = b[:len(b) // 2] if half == 0 else b[len(b) // 2:]
    if len(b) < win:
        return []
    step = max(1, (len(b) - win) // max(1, n - 1)) if n > 1 else 0
    out = []
    for i in range(n):
        s = min(i * step, len(b) - win)
        out.append(torch.tensor(list(b[s:s + win])).long()[None])
    return out


@torch.no_grad()
def states(m, idx):
    """Per layer: H_in (attention_norm of the residual), K pre-RoPE, V."""
    T = idx.shape[1]
    cos, sin = m.cos[:T], m.sin[:T]
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = m.tok_embeddings(idx)
    H, K, V = [], [], []
    for b in m.layers:
        h = b.attention_norm(x)
        H.append(h[0])
        K.append(b.wk(h)[0])
        V.append(b.wv(h)[0])
        x = b(x, cos, sin, mask)
    return H, K, V


def codes(cb, H):
    zs = []
    for l in range(len(H)):
        for part in "kvh":
            k = f"layers.{l}.{part}.enc"
            if k in cb:
                zs.append((H[l] - cb[f"layers.{l}.{part}.mean"]) @ cb[k].t())
    return torch.cat(zs, 1)


HEAD = 2   # layers the "head2" mode recomputes


@torch.no_grad()
def residual(m, idx, j):
    """The residual stream entering layer j (before its attention_norm)."""
    T = idx.shape[1]
    cos, sin = m.cos[:T], m.sin[:T]
    mask = torch.full((T, T), float("-inf")).triu(1)
    x = m.tok_embeddings(idx)
    for b in m.layers[:j]:
        x = b(x, cos, sin, mask)
    return x[0]


def features(mode, idx, H, cb, emb, cons=None):
    f = []
    if mode == "head2":
        f.append(codes(cb, H))
        f.append(emb[idx[0]])
        f.append(residual(cons, idx, HEAD))
    if mode in ("codes", "codes+tok"):
        f.append(codes(cb, H))
    if mode == "full+tok":
        f.append(torch.cat(H, 1))
    if mode in ("codes+tok", "full+tok"):
        f.append(emb[idx[0]])
    f.append(torch.ones(idx.shape[1], 1))
    return torch.cat(f, 1)


def ridge(X, Y, lam=1e-3):
    X, Y = X.double(), Y.double()
    A = X.t() @ X
    A += lam * A.diagonal().mean() * torch.eye(A.shape[0], dtype=A.dtype)
    return torch.linalg.solve(A, X.t() @ Y).float()


@torch.no_grad()
def score(cons, kv, w, P, C):
    """KL and top-1 agreement of the continuation over the cache kv
    (per layer (K pre-RoPE, V) of the P prefix tokens) against own prefill."""
    nkv, hd = cons.layers[0].nkv, cons.layers[0].hd
    cos, sin = cons.cos[:P], cons.sin[:P]
    past = [(tf.apply_rope(k.reshape(1, P, nkv, hd).transpose(1, 2), cos, sin),
             v.reshape(1, P, nkv, hd).transpose(1, 2)) for k, v in kv]
    lg, _ = tf.forward_kv(cons, w[:, P:P + C], past)
    full, _ = tf.forward_kv(cons, w[:, :P + C])
    ref = full[:, P:P + C]
    lp, lq = F.log_softmax(ref, -1), F.log_softmax(lg, -1)
    kl = (lp.exp() * (lp - lq)).sum(-1).sum().item()
    agree = (ref.argmax(-1) == lg.argmax(-1)).sum().item()
    return kl, agree


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "data"))
    ap.add_argument("--consumers", default="", help="comma list (default: every model but base and every adapter)")
    ap.add_argument("--fit-windows", type=int, default=6, help="windows per domain to fit on (default 6)")
    ap.add_argument("--windows", type=int, default=8, help="evaluation windows per consumer (default 8)")
    ap.add_argument("--prefix", type=int, default=320)
    ap.add_argument("--cont", type=int, default=64)
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args()
    torch.set_num_threads(1)
    D = a.data
    win = a.prefix + a.cont
    base = tf.load_model(os.path.join(D, "models", "base", "model.safetensors")).eval()
    cb = tf.read_safetensors(os.path.join(D, "codebooks", "base.safetensors"))
    models = sorted(m for m in os.listdir(os.path.join(D, "models"))
                    if m != "base" and os.path.isdir(os.path.join(D, "models", m)))
    adapters = sorted(m for m in os.listdir(os.path.join(D, "adapters"))
                      if os.path.isdir(os.path.join(D, "adapters", m)))
    names = a.consumers.split(",") if a.consumers else models + adapters
    domains = sorted(f[:-4] for f in os.listdir(os.path.join(D, "heldout")) if f.endswith(".txt"))
    fit = []
    for d in domains:
        fit += windows(os.path.join(D, "heldout", d + ".txt"), 0, a.fit_windows, win)
    fitH = [states(base, w)[0] for w in fit]
    print(f"decode_ceiling: fitting on {len(fit)} windows of {win} tokens (first halves of "
          f"{len(domains)} held-out texts); {len(names)} consumers", file=sys.stderr)
    modes = ("codes", "codes+tok", "full+tok", "head2")
    rows = []
    for name in names:
        t0 = time.time()
        if name in adapters:
            cons, kind = tf.load_peft(os.path.join(D, "models", "base", "model.safetensors"),
                                      os.path.join(D, "adapters", name)), "lora"
        else:
            cons, kind = tf.load_model(os.path.join(D, "models", name, "model.safetensors")), "full"
        cons.eval()
        dom = name if name in adapters else json.load(
            open(os.path.join(D, "models", name, "config.json")))["domain"]
        emb = cons.tok_embeddings.weight.detach()
        L = len(cons.layers)
        Ys = [[] for _ in range(L)]
        for w in fit:
            _, Kc, Vc = states(cons, w)
            for l in range(L):
                Ys[l].append(torch.cat([Kc[l], Vc[l]], 1))
        Y = [torch.cat(y) for y in Ys]
        W = {}
        for mode in modes:
            X = torch.cat([features(mode, w, H, cb, emb, cons) for w, H in zip(fit, fitH)])
            first = HEAD if mode == "head2" else 1
            W[mode] = {l: ridge(X, Y[l]) for l in range(first, L)}
        ev = windows(os.path.join(D, "heldout", dom + ".txt"), 1, a.windows, win)
        acc = {m: [0.0, 0] for m in ("raw",) + modes}
        n = 0
        kvd = cons.layers[0].nkv * cons.layers[0].hd
        for w in ev:
            pre = w[:, :a.prefix]
            Hp, Kp, Vp = states(base, pre)
            _, Kc, Vc = states(cons, pre)
            kl, ag = score(cons, list(zip(Kp, Vp)), w, a.prefix, a.cont)
            acc["raw"][0] += kl
            acc["raw"][1] += ag
            for mode in modes:
                X = features(mode, pre, Hp, cb, emb, cons)
                first = HEAD if mode == "head2" else 1
                kv = [(Kc[l], Vc[l]) for l in range(first)]
                for l in range(first, L):
                    y = X @ W[mode][l]
                    kv.append((y[:, :kvd], y[:, kvd:]))
                kl, ag = score(cons, kv, w, a.prefix, a.cont)
                acc[mode][0] += kl
                acc[mode][1] += ag
            n += a.cont
        row = {"consumer": name, "kind": kind, "text": f"heldout/{dom}.txt (second half)", "tokens": n}
        for m, (kl, ag) in acc.items():
            row[m.replace("+", "_") + "_kl"] = round(kl / n, 5)
            row[m.replace("+", "_") + "_top1"] = round(ag / n, 4)
        rows.append(row)
        print(f"  {name}: top-1 raw {row['raw_top1']:.3f} codes {row['codes_top1']:.3f} "
              f"codes+tok {row['codes_tok_top1']:.3f} full+tok {row['full_tok_top1']:.3f} "
              f"head2 {row['head2_top1']:.3f} "
              f"({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)
    hdr = ("| consumer | kind | raw KL | raw top-1 | codes KL | codes top-1 | codes+tok KL | codes+tok top-1 "
           "| full+tok KL | full+tok top-1 | head2 KL | head2 top-1 |")
    lines = [hdr, "|" + "---|" * 12]
    for r in rows:
        lines.append(f"| {r['consumer']} | {r['kind']} | {r['raw_kl']:.4f} | {r['raw_top1']:.3f} | "
                     f"{r['codes_kl']:.4f} | {r['codes_top1']:.3f} | {r['codes_tok_kl']:.4f} | "
                     f"{r['codes_tok_top1']:.3f} | {r['full_tok_kl']:.4f} | {r['full_tok_top1']:.3f} | "
                     f"{r['head2_kl']:.4f} | {r['head2_top1']:.3f} |")
    lines.append("")
    for m in ("codes", "codes_tok", "full_tok", "head2"):
        reach = sum(r[m + "_top1"] >= 0.95 for r in rows)
        third = sum(r[m + "_kl"] * 3 <= r["raw_kl"] for r in rows)
        lines.append(f"{m.replace('_', '+')}: top-1 >= 0.95 on {reach} of {len(rows)} consumers, "
                     f"KL <= 1/3 of raw reuse's on {third} of {len(rows)}")
    lines.append(f"({a.windows} windows of {a.prefix} + {a.cont} tokens each)")
    print("\n".join(lines))
    if a.md:
        open(a.md, "w").write("\n".join(lines) + "\n")
    if a.json:
        json.dump({"prefix": a.prefix, "cont": a.cont, "windows": a.windows,
                   "fit_windows": len(fit), "rows": rows}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
