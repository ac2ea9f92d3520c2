#!/usr/bin/python3
"""plot_fleet.py JSON PNG — one stored prefix served to a fleet through one
broker, `scdb bench fleet`.

Top left: perplexity vs each consumer's own prefill (%) for SCD (int8 codes)
and raw reuse of the producer's KV, one pair of bars per (consumer, text)
row, LoRA adapters marked.  Top right: mean KL(oracle || method), log scale.
Bottom left: time to first token via the broker (lookup + get into the
consumer's shared-memory arena + the first token) vs own prefill + the first
token.  Bottom right: the broker's RSS and reload time as pairs are added
one SIGHUP at a time (absent from JSON written before the bench measured
them).  The title carries the fleet totals: bytes stored once by scdb vs one
raw f16 KV copy per consumer (per-adapter keying).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def labels_of(rows):
    return [("%s%s" % (r["consumer"], "*" if r["kind"] == "lora" else "")) +
            ("" if r["text"].startswith(r["consumer"]) else "\n" + r["text"].split(" ")[0]) for r in rows]


def pair_bars(ax, rows, left, right, names, colors, ylabel, log=False):
    x = range(len(rows))
    w = 0.4
    ax.bar([i - w / 2 for i in x], left, w, label=names[0], color=colors[0])
    ax.bar([i + w / 2 for i in x], right, w, label=names[1], color=colors[1])
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels_of(rows), rotation=60, ha="right", fontsize=8)
    ax.legend(fontsize=8)


def main(src, dst):
    j = json.load(open(src))
    rows = j["rows"]
    fig, ((a, b), (c, d)) = plt.subplots(2, 2, figsize=(max(10, 1.1 * len(rows) + 5), 8.5))
    pair_bars(a, rows, [(r["ppl_ratio"] - 1) * 100 for r in rows], [(r["raw_ppl_ratio"] - 1) * 100 for r in rows],
              ("SCD (%s codes)" % j.get("codes", ""), "raw reuse"), ("tab:green", "tab:red"),
              "perplexity vs own prefill (%)")
    a.axhline(2, ls=":", color="grey")
    pair_bars(b, rows, [max(r["kl"], 1e-6) for r in rows], [max(r["raw_kl"], 1e-6) for r in rows],
              ("SCD", "raw reuse"), ("tab:green", "tab:red"), "mean KL(oracle || method)", log=True)
    pair_bars(c, rows, [r["ttft_ms"] for r in rows], [r["own_prefill_ms"] for r in rows],
              ("via the broker (get + first token)", "own prefill + first token"), ("tab:blue", "tab:grey"),
              "time to first token (ms, %d-token prefix)" % j.get("prefix", 0))
    if j.get("rss_kb") and j.get("reload_ms"):
        n = len(j["rss_kb"])
        xs = list(range(0, n + 1))
        rss = [j["broker_rss0_kb"] / 1024] + [v / 1024 for v in j["rss_kb"]]
        d.plot(xs, rss, "o-", color="tab:purple", label="broker RSS")
        d.set_xlabel("pairs added, one SIGHUP each")
        d.set_ylabel("broker RSS (MiB)")
        d2 = d.twinx()
        d2.plot(xs[1:], j["reload_ms"], "s--", color="tab:orange", label="reload")
        d2.set_ylabel("reload (ms)")
        d.set_title("%+.0f KiB RSS and %.1f ms reload per added pair; %d consumers registered, %d clients kept"
                    % (j["rss_per_pair_kb"], j["register_ms"], j.get("registered_consumers", n),
                       j.get("clients_kept", 0)), fontsize=8)
        h1, l1 = d.get_legend_handles_labels()
        h2, l2 = d2.get_legend_handles_labels()
        d.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    else:
        d.axis("off")
    fig.suptitle("%d consumers (* = LoRA adapter) from one producer: stored %.0f KB once vs %.0f KB per-adapter keying (1/%.0f)"
                 % (j["consumers"], j["stored_bytes"] / 1024, j["stored_bytes_per_adapter_keying"] / 1024,
                    j["stored_bytes_per_adapter_keying"] / j["stored_bytes"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_fleet.py JSON PNG")
    main(sys.argv[1], sys.argv[2])
