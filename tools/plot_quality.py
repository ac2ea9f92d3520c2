#!/usr/bin/python3
"""plot_quality.py JSON PNG — quality vs payload for `scdb bench quality`.

One panel per consumer: x = payload bytes per prefix token (log scale; the
oracle transfers nothing and is drawn as a horizontal line), y = mean
KL(oracle || method) over continuation tokens (log scale, lower is better).
Points: raw, quant4, droidspeak, scd_reuse, scd_full (f16 codes filled,
int8 codes hollow); lines: the REUSE rank sweeps (r_K and r_V varied
separately) and the patch-budget sweep.

With a rate sweep in the JSON (`--sweep`), a second row of panels: x =
payload bytes per token (linear), y = perplexity vs oracle (%), one colour per
codebook (shipped, fit rK,rV,rH), filled f16 / hollow int8, labelled by the
patch budget; dotted lines at 1/8 and 1/16 of raw f16 KV and at +3% / +5%:
the operator's menu.
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


def plot_sweep(axes, consumers, sweep, data):
    """The rate sweep: payload vs perplexity, every (codebook, codes, patch)."""
    raw = data.get("config", {}).get("raw_f16_bytes_per_token", 2048)
    books = []
    for e in sweep:
        if e["codebook"] not in books:
            books.append(e["codebook"])
    colours = ["black", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink"]
    for ax, cons in zip(axes, consumers):
        for bi, book in enumerate(books):
            col = colours[bi % len(colours)]
            for codes in ("f16", "int8"):
                pts = sorted((e["bytes_per_token"], 100 * e["ppl_vs_oracle"], e["patch_layers"], e["top1"])
                             for e in sweep if e["consumer"] == cons and e["codebook"] == book
                             and e["codes_dtype"] == codes)
                if not pts:
                    continue
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=40, zorder=3, edgecolors=col,
                           facecolors=col if codes == "f16" else "none", marker="o" if codes == "f16" else "s",
                           label="%s, %s" % (book, codes))
                for b, y, k, t1 in pts:
                    ax.annotate("%d" % k, (b, y), textcoords="offset points", xytext=(4, 2), fontsize=6,
                                color="red" if t1 < 0.95 else col)
        for frac, lab in ((8, "1/8 raw"), (16, "1/16 raw")):
            ax.axvline(raw / frac, color="gray", ls=":", lw=1)
            ax.text(raw / frac, 0.98, " " + lab, fontsize=7, va="top", color="gray",
                    transform=ax.get_xaxis_transform())
        for y in (3, 5):
            ax.axhline(y, color="gray", ls=":", lw=1)
        ax.set_xlabel("payload bytes per prefix token (linear)")
        ax.set_ylabel("perplexity vs oracle, %")
        ax.set_title("rate sweep, consumer %s (labels: patch layers; red: top-1 < 0.95)" % cons, fontsize=9)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6, loc="best")


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[1]) as f:
        data = json.load(f)
    res = data.get("results", [])
    abl = data.get("ablations", {})
    consumers = sorted({r["consumer"] for r in res})
    sweep = data.get("sweep", [])
    nrow = 2 if sweep else 1
    fig, axes = plt.subplots(nrow, max(1, len(consumers)), figsize=(6.2 * max(1, len(consumers)), 4.8 * nrow),
                             squeeze=False)
    floor = 1e-5
    for ax, cons in zip(axes[0], consumers):
        rows = [r for r in res if r["consumer"] == cons]
        for r in rows:
            if r["method"] == "oracle":
                continue
            m, col = STYLE.get(r["method"], ("x", "gray"))
            int8 = r.get("codes_dtype") == "int8"
            ax.scatter(r["bytes_per_token"], max(r["kl"], floor), marker=m, s=110 if m == "*" else 55, zorder=3,
                       facecolors="none" if int8 else col, edgecolors=col,
                       label="%s%s (top-1 %.3f)" % (r["method"], " int8" if int8 else "", r["top1"]))
        for key, ls, lab in (("rank_k", "-", "REUSE, r_K sweep"), ("rank_v", "--", "REUSE, r_V sweep")):
            pts = sorted((e["bytes_per_token"], max(e["kl"], floor)) for e in abl.get(key, [])
                         if e["consumer"] == cons)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, color="tab:blue", alpha=0.55, marker=".",
                        label=lab)
        pb = sorted((e["patch_layers"], max(e["kl"], floor), e["bytes_per_token"])
                    for e in abl.get("patch_budget", []) if e["consumer"] == cons
                    and e.get("codes_dtype", "f16") == "f16")
        for k, kl, b in pb:
            ax.annotate("k=%d" % k, (b, kl), textcoords="offset points", xytext=(6, -3), fontsize=7,
                        color="tab:green")
        if pb:
            ax.scatter([p[2] for p in pb], [p[1] for p in pb], marker="|", color="tab:green", s=60,
                       label="patch budget k")
        raw = data.get("config", {}).get("raw_f16_bytes_per_token", 2048)
        for frac in (8, 16):
            ax.axvline(raw / frac, color="gray", ls=":", lw=1)
            ax.text(raw / frac, 0.98, " 1/%d raw" % frac, fontsize=7, va="top", color="gray",
                    transform=ax.get_xaxis_transform())
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("payload bytes per prefix token")
        ax.set_ylabel("KL(oracle || method), nats/token")
        ax.set_title("consumer: %s" % cons)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7, loc="best")
    if sweep:
        plot_sweep(axes[1], consumers, sweep, data)
    fig.suptitle("SCD quality vs payload (producer %s)" % data.get("config", {}).get("producer", "?"))
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
