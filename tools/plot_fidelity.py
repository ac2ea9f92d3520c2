#!/usr/bin/python3
"""plot_fidelity.py JSON PNG — what recompute buys on a restored prefix,
`scdb bench fidelity` (issue 40).

One panel per consumer (its own domain's text, the longest prefix): KL
(own prefill || method) against time to first token, log scale, one line
per method and policy over the recompute budgets (SCD solid, raw reuse
dashed; DroidSpeak layer recompute as points), the pair's calibrated
default starred, own prefill as a vertical line.  A panel's title carries
the default's top-1 and ppl.  Pareto: lower left is better.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"none": "black", "tail": "tab:blue", "initial": "tab:orange",
          "selective": "tab:green", "layers": "tab:red"}


def kind(policy):
    return policy.split(":")[0]


def main(src, dst):
    d = json.load(open(src))
    rows = d["rows"]
    consumers = sorted({r["consumer"] for r in rows})
    n = len(consumers)
    cols = min(4, n)
    nrows = (n + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.4 * nrows), squeeze=False)
    for i, c in enumerate(consumers):
        ax = axes[i // cols][i % cols]
        mine = [r for r in rows if r["consumer"] == c]
        own_text = [r for r in mine if "(second half)" in r["text"]] or mine
        P = max(r["prefix_tokens"] for r in own_text)
        sel = [r for r in own_text if r["prefix_tokens"] == P and r["text"] == own_text[0]["text"]]
        for method, style in (("scd", "-"), ("raw", "--")):
            for k in ("tail", "initial", "selective"):
                pts = sorted(((r["ttft_ms"], r["kl"]) for r in sel
                              if r["method"] == method and kind(r["policy"]) in (k, "none")),
                             key=lambda p: p[0])
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker=".",
                            color=COLORS[k], label="%s %s" % (method, k), linewidth=1)
            lay = [r for r in sel if r["method"] == method and kind(r["policy"]) == "layers"]
            if lay:
                ax.scatter([r["ttft_ms"] for r in lay], [r["kl"] for r in lay],
                           marker="s" if method == "scd" else "x", color=COLORS["layers"],
                           label="%s layers" % method, s=14)
        title = "%s (P=%d)" % (c, P)
        for r in sel:
            if r.get("is_default"):
                ax.scatter([r["ttft_ms"]], [r["kl"]], marker="*", s=120, color="gold",
                           edgecolor="black", zorder=5, label="default")
                title += "\ndefault %s: top-1 %.3f, ppl %+.1f%%" % (r["policy"], r["top1"],
                                                                 (r["ppl_ratio"] - 1) * 100)
        if sel:
            ax.axvline(sel[0]["own_prefill_ms"], color="grey", linewidth=0.8, label="own prefill")
        ax.set_yscale("log")
        ax.set_xlabel("TTFT ms")
        ax.set_ylabel("KL to own prefill")
        ax.set_title(title, fontsize=8)
        if i == 0:
            ax.legend(fontsize=6)
    for j in range(n, nrows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_fidelity.py JSON PNG")
    main(sys.argv[1], sys.argv[2])
