#!/usr/bin/python3
"""plot_evict.py JSON PNG — `scdb bench evict --json` as a picture.

With several domains (the domain suite): one row per budget, one column per
model; along x the domains, seen ones first, then unseen ones (a dashed line
between them), then other texts; along y each policy's KL divided by the
best heuristic's KL on that (model, domain, budget) (log scale; below 1:
better than every heuristic).  The learned policies are drawn thick.

With one text per model (--heldout, or a single --text): one column per
model, two rows: KL to the full cache (log scale) and top-1 agreement with
the full cache, each against the budget fraction, one line per policy.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HEURISTICS = ("streaming", "h2o", "snapkv", "tova")


def label_of(r):
    return r.get("label", r["policy"])


def by_budget(doc, rows):
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    policies = []
    for r in rows:
        if label_of(r) not in policies and r["policy"] != "full":
            policies.append(label_of(r))
    fig, axes = plt.subplots(2, len(models), figsize=(4.2 * len(models), 7), squeeze=False)
    for c, m in enumerate(models):
        mr = [r for r in rows if r["model"] == m]
        text = mr[0].get("text", "")
        for p in policies:
            pr = sorted([r for r in mr if label_of(r) == p], key=lambda r: r["budget"])
            if not pr:
                continue
            xs = [r["budget"] for r in pr]
            learned = pr[0]["policy"] == "distillcache"
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
        for r in (0, 1):
            axes[r][c].set_xlabel("budget (fraction of the sequence)")
            axes[r][c].set_xscale("log", base=2)
            axes[r][c].grid(True, alpha=0.3)
        axes[1][c].legend(fontsize=8, loc="lower right")
    return fig


def by_domain(doc, rows):
    models, budgets, domains, policies = [], [], [], []
    order = {"seen": 0, "unseen": 1, "other": 2}
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
        if r["budget"] not in budgets:
            budgets.append(r["budget"])
        key = (order.get(r.get("split", "other"), 2), r["domain"])
        if key not in domains:
            domains.append(key)
        if label_of(r) not in policies and r["policy"] != "full":
            policies.append(label_of(r))
    domains.sort(key=lambda k: k[0])
    budgets.sort(reverse=True)
    idx = {(m, d, b, label_of(r)): r for r in rows for m, d, b in [(r["model"], r["domain"], r["budget"])]}
    fig, axes = plt.subplots(len(budgets), len(models),
                             figsize=(max(6, 0.42 * len(domains)) * len(models), 3.6 * len(budgets)),
                             squeeze=False)
    markers = "os^vDPX*"
    for bi, b in enumerate(budgets):
        for c, m in enumerate(models):
            ax = axes[bi][c]
            for pi, p in enumerate(policies):
                xs, ys = [], []
                for x, (_, d) in enumerate(domains):
                    h = [idx[(m, d, b, q)]["kl"] for q in HEURISTICS if (m, d, b, q) in idx]
                    r = idx.get((m, d, b, p))
                    if not h or r is None or min(h) <= 0:
                        continue
                    xs.append(x)
                    ys.append(max(r["kl"], 1e-6) / min(h))
                learned = p not in HEURISTICS
                ax.plot(xs, ys, marker=markers[pi % len(markers)], linestyle="-" if learned else "",
                        linewidth=2.2 if learned else 0, markersize=7 if learned else 5,
                        label=p, zorder=3 if learned else 2)
            ax.axhline(1.0, color="grey", linewidth=1)
            n_seen = sum(1 for k in domains if k[0] == 0)
            if 0 < n_seen < len(domains):
                ax.axvline(n_seen - 0.5, color="black", linestyle="--", linewidth=1)
            ax.set_xticks(range(len(domains)))
            ax.set_xticklabels([d for _, d in domains], rotation=60, fontsize=8)
            ax.set_yscale("log")
            ax.set_title("%s, budget %.3f  (seen | unseen)" % (m, b), fontsize=10)
            ax.set_ylabel("KL / best heuristic's KL")
            ax.grid(True, alpha=0.3)
            if bi == 0 and c == 0:
                ax.legend(fontsize=7, loc="upper left")
    return fig


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    rows = doc["rows"]
    per_model = {}
    for r in rows:
        per_model.setdefault(r["model"], set()).add(r.get("domain", r.get("text")))
    many = any(len(v) > 1 for v in per_model.values())
    fig = by_domain(doc, rows) if many else by_budget(doc, rows)
    proto = doc.get("protocol", {})
    fig.suptitle("KV-cache eviction: prefill %s, %s teacher-forced steps, evict every %s, %s windows"
                 % (proto.get("prefill"), proto.get("steps"), proto.get("every"),
                    proto.get("windows")), fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main())
