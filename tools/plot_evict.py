#!/usr/bin/python3
"""plot_evict.py JSON PNG — quality vs budget from `scdb bench evict --json`.

One column per model (text), two rows: KL to the full cache (log scale) and
top-1 agreement with the full cache, each against the budget fraction, one
line per policy.  The learned policy is drawn thick; on models it was not
trained on it is labelled zero-shot.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    rows = doc["rows"]
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    policies = []
    for r in rows:
        if r["policy"] not in policies and r["policy"] != "full":
            policies.append(r["policy"])
    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 7), squeeze=False)
    for c, m in enumerate(models):
        mr = [r for r in rows if r["model"] == m]
        text = mr[0].get("text", "")
        for p in policies:
            pr = sorted([r for r in mr if r["policy"] == p], key=lambda r: r["budget"])
            if not pr:
                continue
            xs = [r["budget"] for r in pr]
            learned = p == "distillcache"
            label = p
            if learned and pr[0].get("zero_shot"):
                label += " (zero-shot)"
            style = dict(marker="o", linewidth=2.6 if learned else 1.2, label=label,
                         zorder=3 if learned else 2)
            axes[0][c].plot(xs, [max(r["kl"], 1e-6) for r in pr], **style)
            axes[1][c].plot(xs, [r["top1"] for r in pr], **style)
        axes[0][c].set_yscale("log")
        axes[0][c].set_title("%s on %s" % (m, text))
        axes[0][c].set_ylabel("KL(full || evicted), nats")
        axes[1][c].set_ylabel("top-1 agreement with full cache")
        axes[1][c].axhline(0.94, color="grey", linestyle=":", linewidth=1)
        for r in (0, 1):
            axes[r][c].set_xlabel("budget (fraction of the sequence)")
            axes[r][c].set_xscale("log", base=2)
            axes[r][c].grid(True, alpha=0.3)
        axes[1][c].legend(fontsize=8, loc="lower right")
    proto = doc.get("protocol", {})
    fig.suptitle("KV-cache eviction: prefill %s, %s teacher-forced steps, evict every %s, %s windows"
                 % (proto.get("prefill"), proto.get("steps"), proto.get("every"),
                    proto.get("windows")), fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
