#!/usr/bin/env python3
"""fleet_compare.py — several `scdb bench fleet --json` runs of the same
consumers side by side: per consumer ppl vs oracle, KL and top-1 of each
run, raw reuse's KL, pair bytes; per run how many consumers (the producer's
identity pair left out) meet issue 23's goals (ppl <= +2% of oracle, KL <=
1/3 of raw reuse's, top-1 >= 0.95), the broker RSS per pair, and paired KL
ratios (geometric mean over consumers) of each run against the first.

  /usr/bin/python3 tools/fleet_compare.py NAME=FILE.json [NAME=FILE.json ...]
"""
import json
import math
import sys


def main():
    runs = []
    for a in sys.argv[1:]:
        name, _, path = a.partition("=")
        runs.append((name, json.load(open(path))))
    if len(runs) < 1:
        sys.exit(__doc__)
    rows = {n: {r["consumer"]: r for r in j["rows"]} for n, j in runs}
    first = runs[0][0]
    names = [r["consumer"] for r in runs[0][1]["rows"]]
    print("| consumer | kind | raw KL | " + " | ".join(f"{n} ppl | {n} KL | {n} top-1" for n, _ in runs) +
          " | pair KB (" + " / ".join(n for n, _ in runs) + ") |")
    print("|---|---|---|" + "---|" * (3 * len(runs)) + "---|")
    for c in names:
        r0 = rows[first][c]
        cells = []
        for n, _ in runs:
            r = rows[n][c]
            cells += [f"{100 * (r['ppl_ratio'] - 1):+.2f}%", f"{r['kl']:.4f}", f"{r['top1']:.3f}"]
        kb = " / ".join(f"{rows[n][c]['pair_bytes'] / 1024:.0f}" for n, _ in runs)
        print(f"| {c} | {r0['kind']} | {r0['raw_kl']:.4f} | " + " | ".join(cells) + f" | {kb} |")
    print()
    others = [c for c in names if rows[first][c]["raw_kl"] > 0]   # the identity pair has raw KL 0
    for n, j in runs:
        R = [rows[n][c] for c in others]
        g = [sum(r["ppl_ratio"] <= 1.02 for r in R), sum(r["kl"] <= r["raw_kl"] / 3 for r in R),
             sum(r["top1"] >= 0.95 for r in R),
             sum(r["ppl_ratio"] <= 1.02 and r["kl"] <= r["raw_kl"] / 3 and r["top1"] >= 0.95 for r in R)]
        print(f"{n}: of {len(R)}: ppl <= +2% {g[0]}, KL <= raw/3 {g[1]}, top-1 >= 0.95 {g[2]}, all three {g[3]}; "
              f"mean KL {sum(r['kl'] for r in R) / len(R):.4f}; broker RSS per pair {j['rss_per_pair_kb']:.0f} KiB "
              f"(started with all: {j['rss_per_pair_kb_fresh']:.0f})")
    for n, _ in runs[1:]:
        lr = [math.log(rows[n][c]["kl"] / rows[first][c]["kl"]) for c in others]
        print(f"KL {n}/{first}: geometric mean {math.exp(sum(lr) / len(lr)):.3f}, lower on "
              f"{sum(x < 0 for x in lr)} of {len(lr)}")


if __name__ == "__main__":
    main()
