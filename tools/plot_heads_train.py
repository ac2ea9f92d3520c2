#!/usr/bin/python3
"""plot_heads_train.py LOG.jsonl [LOG2.jsonl ...] PNG — the per-head scorer's
fit (`scdb train-policy --heads`, evict/train_heads.c) from its JSONL logs.

Panel 1: each generation's fitness of the current scorer (exp of its mean
log KL ratio on that generation's episodes: KL / the best shared
heuristic's, below 1 beats it).  Panel 2: each validation, per budget, the
scorer's score beside the network's (dashed).  Several logs (runs that
continue each other with --init) are drawn one after another.
"""
import json
import math
import sys


def read(path):
    gens, vals = [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if "heads_generation" in d:
                gens.append(d)
            elif "heads_validation" in d:
                vals.append(d)
    return gens, vals


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    logs, png = argv[1:-1], argv[-1]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.2))
    off = 0
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red"]
    for li, path in enumerate(logs):
        gens, vals = read(path)
        if not gens and not vals:
            sys.stderr.write("plot_heads_train: %s has no per-head scorer records\n" % path)
            return 1
        x = [off + g["heads_generation"] for g in gens]
        a1.plot(x, [math.exp(g["theta_fitness"]) for g in gens], lw=0.8, color="tab:gray",
                label="fitness (one generation's episodes)" if li == 0 else None)
        for v in vals:
            for b, s in enumerate(v["by_budget"]):
                a2.plot(off + v["heads_validation"], s, "o", ms=3, color=colors[b % 4])
                if "network_by_budget" in v:
                    a2.plot(off + v["heads_validation"], v["network_by_budget"][b], "_", ms=8,
                            color=colors[b % 4])
        if gens:
            a1.axvline(off, color="k", lw=0.5, ls=":")
        off += max([g["heads_generation"] for g in gens] + [v["heads_validation"] for v in vals])
    a1.axhline(1.0, color="k", ls="--", lw=0.8)
    a1.set_xlabel("generation (runs one after another)")
    a1.set_ylabel("KL / best shared heuristic's")
    a1.set_title("training fitness")
    a1.legend(fontsize=8)
    a2.axhline(1.0, color="k", ls="--", lw=0.8)
    a2.set_xlabel("generation")
    a2.set_ylabel("validation score per budget")
    a2.set_title("validation: scorer (dots) vs network (bars), budget order as logged")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print("wrote %s" % png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
