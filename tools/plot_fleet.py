#!/usr/bin/python3
"""plot_fleet.py JSON PNG — one stored prefix served to a fleet, `scdb bench fleet`.

Left: perplexity vs each consumer's own prefill (%) for SCD (int8 codes) and
raw reuse of the producer's KV, one pair of bars per (consumer, text) row,
LoRA adapters and full fine-tunes marked.  Right: mean KL(oracle || method),
log scale.  The title carries the fleet totals: bytes stored once by scdb vs
one raw f16 KV copy per consumer (per-adapter keying).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    j = json.load(open(src))
    rows = j["rows"]
    labels = [("%s%s" % (r["consumer"], "*" if r["kind"] == "lora" else "")) +
              ("" if r["text"].startswith(r["consumer"]) else "\n" + r["text"].split(" ")[0]) for r in rows]
    x = range(len(rows))
    fig, (a, b) = plt.subplots(1, 2, figsize=(max(8, 0.9 * len(rows) + 4), 4.5))
    w = 0.4
    a.bar([i - w / 2 for i in x], [(r["ppl_ratio"] - 1) * 100 for r in rows], w, label="SCD (%s codes)" % j.get("codes", ""),
          color="tab:green")
    a.bar([i + w / 2 for i in x], [(r["raw_ppl_ratio"] - 1) * 100 for r in rows], w, label="raw reuse", color="tab:red")
    a.axhline(2, ls=":", color="grey")
    a.set_ylabel("perplexity vs own prefill (%)")
    a.set_xticks(list(x))
    a.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
    a.legend(fontsize=8)
    b.bar([i - w / 2 for i in x], [max(r["kl"], 1e-6) for r in rows], w, color="tab:green", label="SCD")
    b.bar([i + w / 2 for i in x], [max(r["raw_kl"], 1e-6) for r in rows], w, color="tab:red", label="raw reuse")
    b.set_yscale("log")
    b.set_ylabel("mean KL(oracle || method)")
    b.set_xticks(list(x))
    b.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
    b.legend(fontsize=8)
    fig.suptitle("%d consumers (* = LoRA adapter) from one producer: stored %.0f KB once vs %.0f KB per-adapter keying (1/%.0f)"
                 % (j["consumers"], j["stored_bytes"] / 1024, j["stored_bytes_per_adapter_keying"] / 1024,
                    j["stored_bytes_per_adapter_keying"] / j["stored_bytes"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_fleet.py JSON PNG")
    main(sys.argv[1], sys.argv[2])
