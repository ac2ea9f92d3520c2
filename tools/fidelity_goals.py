#!/usr/bin/python3
"""fidelity_goals.py JSON [JSON...] — issue 40's goals, checked on the rows
of `scdb bench fidelity --json` (one or more runs: e.g. the own-domain run
and a --text DIR --default-only run).  Prints markdown:

  1. at its calibrated default (is_default), per consumer and text: top-1 >=
     0.95, ppl <= +1%, KL <= 1/5 of raw reuse's;
  2. at that default, TTFT speed-up over own prefill >= 4x at 448 tokens;
  3. at equal budget (same policy and fraction), SCD + recompute has lower
     KL than raw reuse + recompute; and the cheapest SCD setting that meets
     the target (top-1, ppl) recomputes at most half of what raw needs.
"""
import json
import sys
from collections import defaultdict


def main(paths):
    rows = []
    for p in paths:
        rows += json.load(open(p))["rows"]
    # 1 and 2: the defaults
    dflt = [r for r in rows if r.get("is_default")]
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
    print("\ngoal 1: %d of %d (consumer, text, prefix) rows meet all three at the default; %d of %d "
          "consumers on every row.  goal 2: %d of %d consumers >= 4x at 448 tokens." % (
              tot["all"], tot["rows"], tot["cons_all"], len(by_cons), tot["sp"], len(by_cons)))
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
    n = 0
    for (c, P) in sorted(groups):
        rs = groups[(c, P)]
        met = lambda m: [r for r in rs if r["method"] == m and r["top1"] >= 0.95 and r["ppl_ratio"] <= 1.01]
        s = min(met("scd"), key=lambda r: r["recompute_tokens"], default=None)
        w = min(met("raw"), key=lambda r: r["recompute_tokens"], default=None)
        ok = s is not None and (w is None or s["recompute_tokens"] <= w["recompute_tokens"] / 2)
        half += ok
        n += 1
        wc = [0, 0]
        for (c2, t, P2, pol), m in key.items():
            if c2 == c and P2 == P and pol != "none" and "scd" in m and "raw" in m:
                wc[0] += m["scd"]["kl"] < m["raw"]["kl"]
                wc[1] += 1
        print("| %s | %d | %d of %d | %s | %s | %s |" % (
            c, P, wc[0], wc[1], "%s (%.0f)" % (s["policy"], s["recompute_tokens"]) if s else "not met",
            "%s (%.0f)" % (w["policy"], w["recompute_tokens"]) if w else "not met",
            "yes" if ok else "no"))
    allwin = sum(1 for c in win if win[c][0] == win[c][1])
    print("\ngoal 3: SCD has the lower KL at every equal budget on %d of %d consumers; the cheapest SCD "
          "setting meeting the target needs at most half of raw's on %d of %d (consumer, prefix) "
          "(counted met when raw never meets it)." % (allwin, len(win), half, n))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: fidelity_goals.py JSON [JSON...]")
    main(sys.argv[1:])
