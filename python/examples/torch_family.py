"""The family's PyTorch model with a KV cache that can live in an scdb arena.

The model is tools/train_family.py's `Model`, the code that trained the
family (imported, not copied), loaded from data/models/<name>/.  What this
file adds is incremental inference over scdb's one KV layout (kernels.h's
scdb_kv_cache):

    pos  int32 [capacity]                   absolute position of each slot
    k    f32   [n_layers, capacity, kv_dim] after RoPE at pos[slot]
    v    f32   [n_layers, capacity, kv_dim]

`Cache.of_arena(arena)` wraps an scdb.Arena's pos/k/v as torch tensors with
torch.from_numpy — no copy — so KV the broker decoded is attended in place
and the suffix this process prefills lands in the arena too.  `forward()`
runs the model's own modules (attention_norm, wq, wk, wv, RoPE, wo, the
SwiGLU FFN) one layer at a time, appending each new token's K and V at slots
[n, n + T) and attending over every live slot whose position is <= the
query's (causal by position, so an evicted, compacted cache works too).  It
can capture H_in (the normalised attention input the SCD codebook encodes)
straight into an scdb.StatesArena, and the attention weights a live
session's statistics need.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scdb_paths  # noqa: E402  (checkout or installed layout)
sys.path.insert(0, scdb_paths.tools_dir())
import train_family  # noqa: E402  (the family's training code: Model, load_exported, apply_rope)


def data_dir():
    """The shipped assets: $SCDB_DATA, else the checkout's data/, else the
    installed <prefix>/share/scdb (scdb_paths.data_dir)."""
    return scdb_paths.data_dir()


def load(name, data=None):
    """Model `name` of the family (base, code, manpages) in eval mode."""
    d = os.path.join(data or data_dir(), "models", name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    model = train_family.Model({k: cfg[k] for k in train_family.CONFIG})
    train_family.load_exported(model, os.path.join(d, "model.safetensors"))
    model.eval()
    return model


def text_tokens(path, n, offset=0):
    """n byte tokens of a file from offset, as an int32 array (the family's
    vocabulary is bytes)."""
    with open(path, "rb") as f:
        f.seek(offset)
        b = f.read(n)
    if len(b) < n:
        raise ValueError(f"{path}: fewer than {n} bytes from {offset}")
    return np.frombuffer(b, dtype=np.uint8).astype(np.int32)


class Cache:
    """A slot-indexed KV cache (scdb's layout) as torch tensors.

    Cache.private(model, capacity): this process's own memory.
    Cache.of_arena(arena): an scdb.Arena's memory, no copy; n is the
    arena's (arena.n), so a get and this model agree on the live slots."""

    def __init__(self, pos, k, v, arena=None):
        self.pos, self.k, self.v, self.arena = pos, k, v, arena
        self._n = 0

    @classmethod
    def private(cls, model, capacity):
        c = model.c
        kvd = c["n_kv_heads"] * c["head_dim"]
        return cls(torch.zeros(capacity, dtype=torch.int32),
                   torch.zeros(c["n_layers"], capacity, kvd),
                   torch.zeros(c["n_layers"], capacity, kvd))

    @classmethod
    def of_arena(cls, arena):
        return cls(torch.from_numpy(arena.pos), torch.from_numpy(arena.k),
                   torch.from_numpy(arena.v), arena)

    @property
    def capacity(self):
        return self.pos.shape[0]

    @property
    def n(self):
        return self.arena.n if self.arena is not None else self._n

    @n.setter
    def n(self, value):
        if self.arena is not None:
            self.arena.n = value
        else:
            self._n = value

    def copy(self):
        """A private copy of the whole cache (its live slots and n)."""
        c = Cache(self.pos.clone(), self.k.clone(), self.v.clone())
        c.n = self.n
        return c


@torch.no_grad()
def forward(model, tokens, cache, positions=None, h_in=None, h_in_offset=0, probs=None):
    """Run tokens (a 1-D int sequence) through model, appending their K and V
    at cache slots [n, n + T); return the logits [T, vocab].

    positions: absolute positions of the tokens (default: after the last
    live slot's, or 0..T-1 on an empty cache).  h_in: a float32 tensor
    [n_layers, N, d_model] (e.g. torch.from_numpy(states_arena.states(N)))
    that gets each layer's H_in at rows h_in_offset.. .  probs: a float32
    tensor [n_layers, n_heads, T, slots] that gets the attention weights
    over slots [0, n + T) (the rest is left as it is: pass zeros)."""
    c = model.c
    nh, nkv, hd = c["n_heads"], c["n_kv_heads"], c["head_dim"]
    tok = torch.as_tensor(np.asarray(tokens), dtype=torch.long).reshape(-1)
    T = tok.shape[0]
    n0 = cache.n
    n1 = n0 + T
    if n1 > cache.capacity:
        raise ValueError(f"{T} tokens do not fit: {n0} of {cache.capacity} slots live")
    if positions is None:
        p0 = int(cache.pos[n0 - 1]) + 1 if n0 else 0
        positions = torch.arange(p0, p0 + T)
    positions = torch.as_tensor(positions, dtype=torch.long)
    cos, sin = model.cos[positions], model.sin[positions]
    cache.pos[n0:n1] = positions.to(torch.int32)
    slot_pos = cache.pos[:n1].to(torch.long)
    mask = torch.zeros(T, n1)
    mask.masked_fill_(slot_pos[None, :] > positions[:, None], float("-inf"))
    rep = nh // nkv
    x = model.tok_embeddings(tok)
    for li, b in enumerate(model.layers):
        h = b.attention_norm(x)
        if h_in is not None:
            h_in[li, h_in_offset:h_in_offset + T] = h
        q = b.wq(h).view(T, nh, hd).transpose(0, 1)
        k = b.wk(h).view(T, nkv, hd).transpose(0, 1)
        v = b.wv(h).view(T, nkv, hd).transpose(0, 1)
        q, k = train_family.apply_rope(q, cos, sin), train_family.apply_rope(k, cos, sin)
        cache.k[li, n0:n1] = k.transpose(0, 1).reshape(T, nkv * hd)
        cache.v[li, n0:n1] = v.transpose(0, 1).reshape(T, nkv * hd)
        K = cache.k[li, :n1].view(n1, nkv, hd).transpose(0, 1).repeat_interleave(rep, dim=0)
        V = cache.v[li, :n1].view(n1, nkv, hd).transpose(0, 1).repeat_interleave(rep, dim=0)
        p = F.softmax(q @ K.transpose(-1, -2) / math.sqrt(hd) + mask, dim=-1)
        if probs is not None:
            probs[li, :, :, :n1] = p
        x = x + b.wo((p @ V).transpose(0, 1).reshape(T, nh * hd))
        h = b.ffn_norm(x)
        x = x + b.w2(F.silu(b.w1(h)) * b.w3(h))
    cache.n = n1
    return model.output(model.norm(x))


def greedy(model, cache, logits, n, session=None):
    """n greedy tokens continuing from logits (of the last token in cache).
    With a live session, each step's attention goes into its statistics and
    the broker evicts on the session's cadence; returns (tokens, stats) where
    stats has the evictions, the largest cache seen and the broker's time."""
    c = model.c
    out, evictions, max_n, evict_ns = [], 0, cache.n, 0
    for _ in range(n):
        t = int(torch.argmax(logits[-1]))
        out.append(t)
        probs = None
        if session is not None:
            probs = np.zeros((c["n_layers"], c["n_heads"], 1, cache.capacity), np.float32)
        logits = forward(model, [t], cache,
                         probs=torch.from_numpy(probs) if probs is not None else None)
        if session is not None:
            max_n = max(max_n, cache.n)
            if session.step(probs) is not None:
                ev = session.last_eviction
                evictions += ev["evicted"]
                evict_ns += ev["evict_ns"]
    return out, {"evictions": evictions, "max_n": max_n, "evict_ns": evict_ns}


def raw_payloads(cache, n_tokens, block_tokens, dtype=np.float32):
    """The raw-KV payload of the cache's first n_tokens // block_tokens full
    blocks (codebook raw/<model>: per block K [L][block][kv_dim] then V),
    back to back: what Client.put takes for a raw codebook."""
    k = cache.k.numpy()
    v = cache.v.numpy()
    blocks = []
    for i in range(n_tokens // block_tokens):
        s = slice(i * block_tokens, (i + 1) * block_tokens)
        blocks.append(np.ascontiguousarray(k[:, s]).astype(dtype).tobytes())
        blocks.append(np.ascontiguousarray(v[:, s]).astype(dtype).tobytes())
    return b"".join(blocks)
