#!/usr/bin/python3
"""plot_train_policy.py LOG.jsonl [PNG] [LABEL=LOG2.jsonl ...] — the training
curve of `scdb train-policy`.

Prints, per validation, the mean validation KL over (model, domain, budget)
groups, per budget, and the score (geometric mean of KL / the best
heuristic's KL per group), next to each heuristic and to the best heuristic
per group.  With PNG, plots against the episodes run: (1) validation KL per
budget with every heuristic's and the best heuristic's level, (2) the score
(1 = the best heuristic per group), (3) the mean sampled KL of the training
states (a running mean).  Extra LABEL=LOG pairs draw other runs' scores in
panel (2) (ablations).
"""
import json
import sys


def read(path):
    refs, vals, ups = {}, [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            d = json.loads(line)
            if "reference" in d:
                refs[d["reference"]] = d
            elif "validation" in d:
                vals.append(d)
            elif "update" in d:
                ups.append(d)
    return refs, vals, ups


def table(refs, vals):
    names = [k for k in refs if k != "best heuristic per group"]
    nb = len(vals[0]["by_budget"]) if vals else 0
    budgets = sorted({g["budget"] for g in vals[0].get("groups", [])}, reverse=True) if vals else []
    bl = " / ".join("%g" % b for b in budgets) if budgets else "by budget"
    print("| after steps | episodes | seconds | val KL | KL %s | score (x best heuristic) |" % bl)
    print("|---|---|---|---|---|---|")
    for v in vals:
        print("| %d%s | %d | %.0f | %.5f | %s | %.3f |" % (
            v["validation"], " (best)" if v.get("best") else "", v.get("episodes", 0),
            v.get("seconds", 0), v["val_kl"], " / ".join("%.5f" % x for x in v["by_budget"]),
            v.get("ratio", float("nan"))))
    for k in names + ["best heuristic per group"]:
        if k in refs:
            r = refs[k]
            print("| %s | | | %.5f | %s | |" % (k, r["val_kl"], " / ".join("%.5f" % x for x in r["by_budget"][:nb])))


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    refs, vals, ups = read(sys.argv[1])
    if not vals:
        sys.stderr.write("plot_train_policy: no validation lines in %s\n" % sys.argv[1])
        return 1
    table(refs, vals)
    if len(sys.argv) < 3:
        return 0
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.6))
    xs = [v.get("episodes", v["validation"]) for v in vals]
    budgets = sorted({g["budget"] for g in vals[0].get("groups", [])}, reverse=True)
    colours = ["C0", "C1", "C2", "C3"]
    for b in range(len(vals[0]["by_budget"])):
        lab = "budget %g" % budgets[b] if b < len(budgets) else "budget %d" % b
        ax[0].plot(xs, [v["by_budget"][b] for v in vals], marker="o", color=colours[b % 4],
                   linewidth=2, label="learned, " + lab)
        best = refs.get("best heuristic per group")
        if best:
            ax[0].axhline(best["by_budget"][b], color=colours[b % 4], linestyle="--", linewidth=1.2,
                          label="best heuristic per group, " + lab)
        for k, style in (("snapkv", ":"), ("h2o", "-."), ("streaming", (0, (1, 3))), ("tova", (0, (5, 5)))):
            if k in refs:
                ax[0].axhline(refs[k]["by_budget"][b], color=colours[b % 4], linestyle=style,
                              linewidth=0.8, alpha=0.6, label=k if b == 0 else None)
    ax[0].set_yscale("log")
    ax[0].set_xlabel("training episodes")
    ax[0].set_ylabel("validation KL (mean over model x domain)")
    ax[0].set_title("validation KL vs the heuristics")
    ax[0].legend(fontsize=7)
    ax[1].plot(xs, [v["ratio"] for v in vals], marker="o", linewidth=2, label="this run")
    for extra in sys.argv[3:]:
        if "=" not in extra:
            continue
        lab, path = extra.split("=", 1)
        _, v2, _ = read(path)
        if v2:
            ax[1].plot([v.get("episodes", v["validation"]) for v in v2], [v["ratio"] for v in v2],
                       marker=".", linewidth=1.2, label=lab)
    ax[1].axhline(1.0, color="grey", linestyle="--", label="best heuristic per group")
    ax[1].set_yscale("log")
    ax[1].set_xlabel("training episodes")
    ax[1].set_ylabel("geo-mean KL / best heuristic's KL")
    ax[1].set_title("validation score (below 1: beats the best heuristic)")
    ax[1].legend(fontsize=7)
    if ups:
        ep = [u["episodes"] for u in ups]
        kl = [-u["reward"] for u in ups]
        w = max(1, len(kl) // 50)
        run = [sum(kl[max(0, i - w + 1):i + 1]) / len(kl[max(0, i - w + 1):i + 1]) for i in range(len(kl))]
        ax[2].plot(ep, run, linewidth=1.5)
        ax[2].set_yscale("log")
    ax[2].set_xlabel("training episodes")
    ax[2].set_ylabel("sampled KL over the horizon (running mean)")
    ax[2].set_title("training states")
    for a in ax:
        a.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)
    print("wrote %s" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
