#!/usr/bin/python3
"""fidelity_goals.py [--pairs DIR] JSON [JSON...] — issue 40's goals,
checked on the rows of `scdb bench fidelity --json` (one or more runs: e.g.
the own-domain run and a --text DIR --default-only run).  Prints markdown:

  1. at its calibrated default (is_default), per consumer and text: top-1 >=
     0.95, ppl <= +1%, KL <= 1/5 of raw reuse's;
  2. at that default, TTFT speed-up over own prefill >= 4x at 448 tokens;
  3. at equal budget (same policy and fraction), SCD + recompute has lower
     KL than raw reuse + recompute; and the cheapest SCD setting that meets
     the target (top-1, ppl) recomputes at most half of what raw needs.

A consumer with no default (rows' has_default false: neither calibrated in
its pair nor set in the broker config) is listed as "no default" and left
out of goals 1 and 2.  JSON written before has_default existed says nothing
either way (its "none" rows read is_default even without a default): with
--pairs DIR (e.g. data/pairs) a consumer counts as having a default when its
pair PRODUCER__NAME.safetensors carries `recompute` metadata; without it,
such rows are taken as they are and the output says so.

Goal 3 when raw reuse never reaches the target: raw was tried only up to
its largest budget, so "SCD needs at most half of raw" is established only
when SCD's cheapest setting is at most half of the largest raw budget
tried; otherwise it is counted "undetermined", not met.
"""
import json
import os
import struct
import sys
from collections import defaultdict


def pair_has_default(pairs, producer, consumer):
    """True/False from the pair's metadata; None when there is no pair."""
    p = os.path.join(pairs, "%s__%s.safetensors" % (producer, consumer))
    try:
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            meta = json.loads(f.read(n)).get("__metadata__", {}) or {}
    except (OSError, ValueError, struct.error):
        return None
    return bool(meta.get("recompute"))


def main(paths, pairs=None):
    rows = []
    for p in paths:
        d = json.load(open(p))
        for r in d["rows"]:
            r.setdefault("_producer", d.get("producer", "base"))
        rows += d["rows"]
    # has a default at all: the rows' has_default, else the pair's metadata
    # (--pairs), else unknown (None)
    has = {}
    unknown = set()
    for r in rows:
        c = r["consumer"]
        if "has_default" in r:
            has[c] = bool(r["has_default"]) and has.get(c, True)
    for r in rows:
        c = r["consumer"]
        if c in has:
            continue
        v = pair_has_default(pairs, r["_producer"], c) if pairs else None
        if v is None:
            unknown.add(c)
        else:
            has[c] = v
    nodef = sorted(c for c, v in has.items() if not v)
    # 1 and 2: the defaults, of consumers that have one
    dflt = [r for r in rows if r.get("is_default") and has.get(r["consumer"], True)]
    by_cons = defaultdict(list)
    for r in dflt:
        by_cons[r["consumer"]].append(r)
    print("| consumer | default | texts x prefixes | top-1 >= 0.95 | ppl <= +1% | KL <= raw/5 | all three "
          "| speed-up >= 4x at 448 (own text) | worst top-1 | worst ppl | worst KL/raw |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    tot = defaultdict(int)
    for c in sorted(by_cons):
        rs = by_cons[c]
        t1 = sum(r["top1"] >= 0.95 for r in rs)
        pp = sum(r["ppl_ratio"] <= 1.01 for r in rs)
        kl = sum(r["kl"] <= r["raw_kl"] / 5 for r in rs)
        al = sum(r["top1"] >= 0.95 and r["ppl_ratio"] <= 1.01 and r["kl"] <= r["raw_kl"] / 5 for r in rs)
        own448 = [r for r in rs if r["prefix_tokens"] == 448 and "(second half)" in r["text"]]
        sp = ("%.1fx" % own448[0]["speedup"]) if own448 else "-"
        ok4 = bool(own448) and own448[0]["speedup"] >= 4
        tot["rows"] += len(rs)
        tot["all"] += al
        tot["cons_all"] += al == len(rs)
        tot["sp"] += ok4
        print("| %s | %s | %d | %d | %d | %d | %d | %s %s | %.3f | %+.1f%% | %.2f |" % (
            c, rs[0]["policy"], len(rs), t1, pp, kl, al, sp, "yes" if ok4 else "no",
            min(r["top1"] for r in rs), (max(r["ppl_ratio"] for r in rs) - 1) * 100,
            max(r["kl"] / r["raw_kl"] for r in rs)))
    for c in nodef:
        print("| %s | no default | - | - | - | - | - | - | - | - | - |" % c)
    print("\ngoal 1: %d of %d (consumer, text, prefix) rows meet all three at the default; %d of %d "
          "consumers on every row.  goal 2: %d of %d consumers >= 4x at 448 tokens." % (
              tot["all"], tot["rows"], tot["cons_all"], len(by_cons), tot["sp"], len(by_cons)))
    if nodef:
        print("Left out of goals 1 and 2: %d consumer%s with no default (%s)." % (
            len(nodef), "" if len(nodef) == 1 else "s", ", ".join(nodef)))
    if unknown:
        print("Not known whether %s ha%s a default (JSON without has_default; --pairs DIR to check): "
              "%s is_default rows taken as they are." % (
                  ", ".join(sorted(unknown)), "s" if len(unknown) == 1 else "ve",
                  "its" if len(unknown) == 1 else "their"))
    # 3: equal budgets, and the cheapest to target
    own = [r for r in rows if "(second half)" in r["text"]]
    key = defaultdict(dict)
    for r in own:
        key[(r["consumer"], r["text"], r["prefix_tokens"], r["policy"])][r["method"]] = r
    win = defaultdict(lambda: [0, 0])
    for (c, t, P, pol), m in key.items():
        if pol == "none" or "scd" not in m or "raw" not in m:
            continue
        win[c][0] += m["scd"]["kl"] < m["raw"]["kl"]
        win[c][1] += 1
    print("\n| consumer | prefix | SCD KL < raw KL at equal budget | cheapest SCD to target (tokens) | "
          "cheapest raw to target (tokens) | SCD <= half of raw |")
    print("|---|---|---|---|---|---|")
    groups = defaultdict(list)
    for r in own:
        if not r["policy"].startswith("layers"):
            groups[(r["consumer"], r["prefix_tokens"])].append(r)
    half = 0
    undet = 0
    n = 0
    for (c, P) in sorted(groups):
        rs = groups[(c, P)]
        met = lambda m: [r for r in rs if r["method"] == m and r["top1"] >= 0.95 and r["ppl_ratio"] <= 1.01]
        s = min(met("scd"), key=lambda r: r["recompute_tokens"], default=None)
        w = min(met("raw"), key=lambda r: r["recompute_tokens"], default=None)
        # raw never met: it needs more than its largest budget tried, so
        # half of it is only known to exceed half of that budget
        raw_max = max((r["recompute_tokens"] for r in rs if r["method"] == "raw"), default=0)
        if s is None:
            verdict = "no"
        elif w is not None:
            verdict = "yes" if s["recompute_tokens"] <= w["recompute_tokens"] / 2 else "no"
        elif s["recompute_tokens"] <= raw_max / 2:
            verdict = "yes (raw not met up to %.0f)" % raw_max
        else:
            verdict = "undetermined (raw not met up to %.0f)" % raw_max
        half += verdict.startswith("yes")
        undet += verdict.startswith("undetermined")
        n += 1
        wc = [0, 0]
        for (c2, t, P2, pol), m in key.items():
            if c2 == c and P2 == P and pol != "none" and "scd" in m and "raw" in m:
                wc[0] += m["scd"]["kl"] < m["raw"]["kl"]
                wc[1] += 1
        print("| %s | %d | %d of %d | %s | %s | %s |" % (
            c, P, wc[0], wc[1], "%s (%.0f)" % (s["policy"], s["recompute_tokens"]) if s else "not met",
            "%s (%.0f)" % (w["policy"], w["recompute_tokens"]) if w else "not met",
            verdict))
    allwin = sum(1 for c in win if win[c][0] == win[c][1])
    print("\ngoal 3: SCD has the lower KL at every equal budget on %d of %d consumers; the cheapest SCD "
          "setting meeting the target needs at most half of raw's on %d of %d (consumer, prefix), "
          "undetermined on %d (raw never met the target and SCD's cheapest is over half of the largest "
          "raw budget tried: not counted met), not met on %d." % (allwin, len(win), half, n, undet,
                                                                  n - half - undet))


if __name__ == "__main__":
    args = sys.argv[1:]
    pairs = None
    if args[:1] == ["--pairs"]:
        if len(args) < 2:
            sys.exit("usage: fidelity_goals.py [--pairs DIR] JSON [JSON...]")
        pairs, args = args[1], args[2:]
    if not args:
        sys.exit("usage: fidelity_goals.py [--pairs DIR] JSON [JSON...]")
    main(args, pairs)
