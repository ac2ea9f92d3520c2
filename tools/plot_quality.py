#!/usr/bin/python3
"""plot_quality.py JSON PNG — quality vs payload for `scdb bench quality`.

One panel per consumer: x = payload bytes per prefix token (log scale; the
oracle transfers nothing and is drawn as a horizontal line), y = mean
KL(oracle || method) over continuation tokens (log scale, lower is better).
Points: raw, quant4, droidspeak, scd_reuse, scd_full; lines: the REUSE rank
sweeps (r_K and r_V varied separately) and the patch-budget sweep.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "raw": ("s", "tab:red"),
    "quant4": ("v", "tab:orange"),
    "droidspeak": ("D", "tab:purple"),
    "scd_reuse": ("o", "tab:blue"),
    "scd_full": ("*", "tab:green"),
}


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        data = json.load(f)
    res = data.get("results", [])
    abl = data.get("ablations", {})
    consumers = sorted({r["consumer"] for r in res})
    fig, axes = plt.subplots(1, max(1, len(consumers)), figsize=(6.2 * max(1, len(consumers)), 4.8),
                             squeeze=False)
    floor = 1e-5
    for ax, cons in zip(axes[0], consumers):
        rows = [r for r in res if r["consumer"] == cons]
        for r in rows:
            if r["method"] == "oracle":
                continue
            m, col = STYLE.get(r["method"], ("x", "gray"))
            ax.scatter(r["bytes_per_token"], max(r["kl"], floor), marker=m, color=col, s=110 if m == "*" else 55,
                       zorder=3, label="%s (top-1 %.3f)" % (r["method"], r["top1"]))
        for key, ls, lab in (("rank_k", "-", "REUSE, r_K sweep"), ("rank_v", "--", "REUSE, r_V sweep")):
            pts = sorted((e["bytes_per_token"], max(e["kl"], floor)) for e in abl.get(key, [])
                         if e["consumer"] == cons)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, color="tab:blue", alpha=0.55, marker=".",
                        label=lab)
        pb = sorted((e["patch_layers"], max(e["kl"], floor), e["bytes_per_token"])
                    for e in abl.get("patch_budget", []) if e["consumer"] == cons)
        for k, kl, b in pb:
            ax.annotate("k=%d" % k, (b, kl), textcoords="offset points", xytext=(6, -3), fontsize=7,
                        color="tab:green")
        if pb:
            ax.scatter([p[2] for p in pb], [p[1] for p in pb], marker="|", color="tab:green", s=60,
                       label="patch budget k")
        raw = data.get("config", {}).get("raw_f16_bytes_per_token", 2048)
        ax.axvline(raw / 8, color="gray", ls=":", lw=1)
        ax.text(raw / 8, ax.get_ylim()[1] if ax.get_ylim()[1] > 0 else 1, " 1/8 raw", fontsize=7, va="top",
                color="gray")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("payload bytes per prefix token")
        ax.set_ylabel("KL(oracle || method), nats/token")
        ax.set_title("consumer: %s" % cons)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="best")
    fig.suptitle("SCD quality vs payload (producer %s)" % data.get("config", {}).get("producer", "?"))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
