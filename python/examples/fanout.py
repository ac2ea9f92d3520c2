#!/usr/bin/python3
"""The fan-out demo in Python: `scdb demo` with PyTorch as the model.

    PYTHONPATH=build/python /usr/bin/python3 python/examples/fanout.py

1. starts a broker on a private temp dir (scdb_broker.Broker: the family, the
   base producer's SCD codebook, one pair per specialist, the DistillCache
   policy);
2. producer `base` (the PyTorch model that trained it, tools/train_family.py)
   prefills a shared prefix, writing its states (H_in of every layer)
   straight into a broker-made shared-memory states arena, and has the broker
   encode and store them as SCD codes (Client.put_states);
3. each consumer (`code`, `manpages`): its own prefill of the prefix as the
   reference, then lookup + get of the prefix decoded into its own KV space
   in a shared-memory arena, wrapped as torch tensors with no copy
   (torch.from_numpy(arena.k)); the last prefix token re-run over it for the
   first logits; and two greedy continuations: from the whole decoded prefix
   (a private copy), and in the arena through a live session that the broker
   keeps within a slot budget with the DistillCache policy;
4. prints the same table as `scdb demo`; stops the broker.

Everything runs in this one process, one step after the other (the timings
do not share the cores); each role has its own scdb.Client.  Exit status 0
when every step ran.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

import scdb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_family as tfm  # noqa: E402
from scdb_broker import Broker, SPECIALISTS  # noqa: E402

CODEBOOK = "base-scd"


def show(tokens):
    return "".join(chr(t) if 32 <= t < 127 else ("|" if t == 10 else ".") for t in tokens)


def producer(endpoint, tokens):
    """base prefills tokens, its H_in captured into a states arena; the
    broker encodes and stores them.  Returns the line `scdb demo` prints."""
    model = tfm.load("base")
    with scdb.Client(endpoint, name="fanout producer base") as c:
        info = c.register("base", scdb.PRODUCER, CODEBOOK)
        with c.states_arena(len(tokens)) as sa:
            h_in = torch.from_numpy(sa.states(len(tokens)))   # shared memory, no copy
            cache = tfm.Cache.private(model, len(tokens))
            t0 = time.perf_counter()
            tfm.forward(model, tokens, cache, h_in=h_in)
            t_prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            r = c.put_states(tokens, sa)
            t_put = time.perf_counter() - t0
    return (f"producer base: prefilled {len(tokens)} tokens in {t_prefill * 1e3:.1f} ms (states "
            f"captured into shared memory); broker encoded and stored {r['n_new']} blocks of "
            f"{info['block_tokens']} tokens ({info['block_bytes'] // info['block_tokens']} "
            f"B/token of codes) in {t_put * 1e3:.1f} ms")


def consumer(endpoint, name, tokens, gen, budget, policy, cadence):
    """One specialist: own prefill vs scdb, and the two continuations.
    Returns the row's figures."""
    model = tfm.load(name)
    cfg = model.c
    prefix = len(tokens)
    slots = prefix + gen

    # reference: the consumer prefills the prefix itself
    own = tfm.Cache.private(model, slots)
    t0 = time.perf_counter()
    logits = tfm.forward(model, tokens, own)
    ttft_own = time.perf_counter() - t0
    gen_own, _ = tfm.greedy(model, own, logits, gen)

    with scdb.Client(endpoint, name=f"fanout consumer {name}") as c:
        info = c.register(name, scdb.CONSUMER, CODEBOOK)
        with c.arena(slots) as arena:
            kv = tfm.Cache.of_arena(arena)      # torch tensors over the arena
            t0 = time.perf_counter()
            c.lookup(tokens)
            have = c.get(tokens, arena)
            if have == 0:
                raise RuntimeError(f"consumer {name}: nothing stored for the prefix")
            # keep have - 1 slots, re-run token have - 1 (and any uncached suffix)
            arena.n = have - 1
            rest = prefix - (have - 1)
            probs = np.zeros((cfg["n_layers"], cfg["n_heads"], rest, slots), np.float32)
            logits0 = tfm.forward(model, tokens[have - 1:], kv, probs=torch.from_numpy(probs))
            ttft_scdb = time.perf_counter() - t0
            decode_ms = c.last_get["decode_ns"] / 1e6

            # continuation 1: the whole decoded prefix (a private copy)
            gen_scdb, _ = tfm.greedy(model, kv.copy(), logits0, gen)

            # continuation 2: in the arena, through a live session at the budget
            with arena.session(budget, policy, cadence, n_heads=cfg["n_heads"]) as s:
                s.add_stats(probs)
                gen_live, st = tfm.greedy(model, kv, logits0, gen, session=s)

    raw_bytes = cfg["n_layers"] * 2 * cfg["n_kv_heads"] * cfg["head_dim"] * 2
    code_bytes = info["block_bytes"] / info["block_tokens"]
    return dict(name=name, ttft_own=ttft_own, ttft_scdb=ttft_scdb, decode_ms=decode_ms,
                code_bytes=code_bytes, raw_bytes=raw_bytes,
                same=sum(a == b for a, b in zip(gen_own, gen_scdb)),
                same_live=sum(a == b for a, b in zip(gen_own, gen_live)), gen=gen,
                evictions=st["evictions"], max_n=st["max_n"], evict_ns=st["evict_ns"],
                own=show(gen_own), scdb=show(gen_scdb), live=show(gen_live))


def row(r):
    each = r["evict_ns"] / 1e3 / r["evictions"] if r["evictions"] else 0.0
    return (f"| {r['name']} | {r['ttft_own'] * 1e3:.1f} ms | {r['ttft_scdb'] * 1e3:.1f} ms "
            f"(decode {r['decode_ms']:.1f} ms) | {r['ttft_own'] / r['ttft_scdb']:.1f}x | "
            f"{r['code_bytes']:.0f} B vs {r['raw_bytes']:.0f} B "
            f"(1/{r['raw_bytes'] / r['code_bytes']:.1f}) | {r['same']}/{r['gen']} | "
            f"{r['same_live']}/{r['gen']} ({r['evictions']} evictions, <= {r['max_n']} slots, "
            f"{each:.0f} us each) |\n"
            f"|   own prefill:  `{r['own']}` |\n|   via scdb:     `{r['scdb']}` |\n"
            f"|   live session: `{r['live']}` |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", type=int, default=384, help="prefix tokens, a multiple of 64")
    ap.add_argument("--gen", type=int, default=32, help="tokens each consumer generates")
    ap.add_argument("--text", help="prefix text (default data/heldout/manpages.txt, from 48 KiB)")
    ap.add_argument("--budget", type=int, help="live session: slots kept (default prefix / 2)")
    ap.add_argument("--policy", default="distillcache", help="live session policy")
    ap.add_argument("--cadence", type=int, default=8, help="evict every N generated tokens")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    a = ap.parse_args(argv)
    if a.prefix < 64 or a.prefix % 64 or a.gen < 1 or a.prefix + a.gen > 512:
        ap.error("--prefix must be a positive multiple of 64 and prefix + gen <= 512")
    budget = a.budget if a.budget is not None else a.prefix // 2
    if a.threads:
        torch.set_num_threads(a.threads)
    text = a.text or os.path.join(tfm.data_dir(), "heldout", "manpages.txt")
    off = (48 << 10) if os.path.getsize(text) > (48 << 10) + a.prefix else 0
    tokens = tfm.text_tokens(text, a.prefix, off)

    with Broker() as b:
        print(f"scdb fanout (Python, PyTorch {torch.__version__}): broker on {b.endpoint}, "
              f"producer base, consumers: {' '.join(SPECIALISTS)}")
        print(f"prefix: {a.prefix} bytes of {text}; each consumer generates {a.gen} tokens "
              f"greedily\n")
        print(producer(b.endpoint, tokens))
        print(f"\n| consumer | TTFT own prefill | TTFT via scdb | speed-up | payload/token vs raw "
              f"f16 KV | same tokens, whole prefix | same tokens, live session ({a.policy}, "
              f"budget {budget}, every {a.cadence}) |\n|---|---|---|---|---|---|---|")
        for name in SPECIALISTS:
            print(row(consumer(b.endpoint, name, tokens, a.gen, budget, a.policy, a.cadence)),
                  flush=True)
        rc = b.close()
    print("\nTTFT via scdb = lookup + get (broker decodes the stored codes into this consumer's\n"
          "shared-memory arena, seen by PyTorch with no copy) + re-running the last prefix\n"
          "token; own = PyTorch prefill of the prefix.  same tokens = greedy tokens equal to the\n"
          "own-prefill continuation's, position by position.")
    if rc != 0:
        print(f"fanout: broker exited {rc}", file=sys.stderr)
        return 1
    print("fanout: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
