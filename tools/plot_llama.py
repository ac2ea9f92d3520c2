#!/usr/bin/python3
"""plot_llama.py JSON PNG — the fleet in llama.cpp, `scdb bench llama`.

Left: time to first token via scdb (restore into the consumer's llama.cpp
sequence + its first token) against llama.cpp's own prefill + that token,
per consumer (LoRA adapters marked *), with the speed-up above each pair.
Right: KL(own prefill || method) over the continuation for SCD, raw reuse
of base's KV and the consumer's own KV stored raw (exact; 0 when the layout
is right, drawn at the axis floor), log scale.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    d = json.load(open(src))
    # the family's rows (the 1b rows are cost only: no quality to plot)
    rows = [r for r in d["rows"] if r.get("shape", "family") == "family"]
    if not rows:
        sys.exit("plot_llama: no rows in %s" % src)
    names = [r["consumer"] + ("*" if r["kind"] == "lora" else "") for r in rows]
    x = range(len(rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(max(10, 0.9 * len(rows) + 4), 4.8))
    w = 0.4
    a.bar([i - w / 2 for i in x], [r["own_prefill_ms"] for r in rows], w, label="own prefill")
    a.bar([i + w / 2 for i in x], [r["ttft_ms"] for r in rows], w, label="via scdb")
    for i, r in enumerate(rows):
        a.text(i - 0.2, r["own_prefill_ms"], "%.1fx" % r["speedup"], ha="center", va="bottom", fontsize=7)
    a.set_xticks(list(x))
    a.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    a.set_ylabel("time to first token (ms)")
    a.set_title("TTFT, %d-token prefix" % rows[0]["prefix_tokens"])
    a.legend(fontsize=8)
    floor = 1e-6
    w = 0.27
    for k, (key, lab) in enumerate((("kl", "SCD"), ("raw_kl", "raw reuse"), ("exact_kl", "exact"))):
        b.bar([i + (k - 1) * w for i in x], [max(r[key], floor) for r in rows], w, label=lab)
    b.set_yscale("log")
    b.set_xticks(list(x))
    b.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    b.set_ylabel("KL(own prefill || method), nats")
    b.set_title("quality vs llama.cpp's own prefill")
    b.legend(fontsize=8)
    fig.suptitle("scdb in llama.cpp %s: capture overhead %+.1f%%, engines within %.1e" % (
        rows[0]["engine"].split(" ")[-1], 100 * d.get("capture_overhead", 0),
        d.get("ref_max_dlogit", 0)))
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_llama.py JSON PNG")
    main(sys.argv[1], sys.argv[2])
