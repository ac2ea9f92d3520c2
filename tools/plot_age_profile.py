#!/usr/bin/python3
"""plot_age_profile.py PROFILE.json [PNG] — what a learned eviction policy
keeps, by age, at each budget.

PROFILE.json is what `scdb train-policy --age-profile PROFILE.json --profile
A.safetensors --profile B.safetensors ...` writes: for each policy and
budget, the fraction of the slots kept after each eviction that fall in
each age bin (age = the newest slot's position minus the slot's: 0, 1, 2-3,
..., 128-255, 256 and older), over the val texts' windows, with the window the policy
protects and its mean KL.

Prints one table per budget (policies as columns); with PNG, one panel per
budget: the kept share per age bin of every policy (bars side by side), the
protected recent window of each as a dashed line at its age.  A policy whose
decisions change with the budget shows a different shape per panel; one
that only scales one rule shows the same shape shifted.
"""
import json
import sys


def bin_label(b):
    lo, hi = b
    if hi < 0:
        return "%d+" % lo
    return "%d" % lo if lo == hi else "%d-%d" % (lo, hi)


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        d = json.load(f)
    bins, budgets, pols = d["bins"], d["budgets"], d["policies"]
    for bi, b in enumerate(budgets):
        print("budget %g%%: kept share by age (protected recent window; mean KL)" % (100 * b))
        print("| age | " + " | ".join(p["label"] for p in pols) + " |")
        print("|---|" + "---|" * len(pols))
        for k, bn in enumerate(bins):
            print("| %s | " % bin_label(bn) +
                  " | ".join("%.3f" % p["profile"][bi][k] for p in pols) + " |")
        print("| window | " + " | ".join("%d" % p["window"][bi][1] for p in pols) + " |")
        print("| KL | " + " | ".join("%.5f" % p["kl"][bi] for p in pols) + " |")
        print()
    if len(sys.argv) < 3:
        return 0
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(budgets)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), sharey=True, squeeze=False)
    w = 0.8 / max(1, len(pols))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for bi, b in enumerate(budgets):
        ax = axes[0][bi]
        for pi, p in enumerate(pols):
            xs = [k - 0.4 + w * (pi + 0.5) for k in range(len(bins))]
            ax.bar(xs, p["profile"][bi], width=w, color=colors[pi % len(colors)],
                   label="%s (KL %.4f)" % (p["label"], p["kl"][bi]))
            r = p["window"][bi][1]
            if r > 0:
                # the bin the protected window's oldest slot falls in
                k = next((i for i, bn in enumerate(bins) if bn[0] <= r - 1 and (bn[1] < 0 or r - 1 <= bn[1])), len(bins) - 1)
                ax.axvline(k + 0.4, color=colors[pi % len(colors)], ls="--", lw=1)
        ax.set_title("budget %g%% (%d slots)" % (100 * b, round(b * (d["prefill"] + d["steps"]))))
        ax.set_xticks(range(len(bins)))
        ax.set_xticklabels([bin_label(bn) for bn in bins], rotation=60, fontsize=7)
        ax.set_xlabel("age of the kept slot (tokens)")
        if bi == 0:
            ax.set_ylabel("share of the kept slots")
        ax.legend(fontsize=6, loc="upper left")
    fig.suptitle("Kept set by age after each eviction (val texts, %d windows; dashed: the "
                 "protected recent window)" % d["windows"], fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=90)
    print("wrote %s" % sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
