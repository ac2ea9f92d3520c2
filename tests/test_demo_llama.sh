#!/usr/bin/env bash
# test_demo_llama.sh SCDB DATA — the fan-out demo in llama.cpp end to end
# with a fleet of three LoRA adapters (issue 39: "a 3-adapter fleet through
# llama.cpp end to end in CI"): a data folder holding base, the adapters
# c-header, cmake and perl, the codebook and their pairs; `scdb demo
# --engine llama.cpp` exports them to GGUF, loads the adapters once beside
# base in one llama.cpp process, base prefills and stores the prefix once,
# and every adapter restores it into its own llama.cpp sequence.  Checked:
# exit 0, one row per adapter, each a LoRA adapter whose raw restore of its
# own prefill is exact (top-1 1.000, KL 0: the blob layout), and finite
# SCD figures.  Behaviour only: no timing or speed-up is asserted.
set -u
scdb="$1"
data="$2"
. "$(dirname "$0")/helpers/cli_expect.sh"

d="$tmp/data"
mkdir -p "$d/models" "$d/adapters"
ln -s "$data/models/base" "$d/models/base"
cp "$data/models/TRAINING.json" "$d/models/"
cp "$data/adapters/TRAINING.json" "$d/adapters/"
for a in c-header cmake perl; do ln -s "$data/adapters/$a" "$d/adapters/$a"; done
for x in codebooks pairs heldout policies; do ln -s "$data/$x" "$d/$x"; done

expect 0 "the demo in llama.cpp with 3 adapters exits 0" -- \
  "$scdb" demo --engine llama.cpp --data "$d" --prefix 128 --gen 8
grep -q "^demo: ok" "$tmp/out" && ok "it says ok" || bad "no 'demo: ok'"
rows=$(grep -c "^| [a-z0-9-]* | lora | 128 |" "$tmp/out")
[ "$rows" -eq 3 ] && ok "one row per adapter, each a LoRA adapter of a 128-token prefix" \
  || { bad "$rows lora rows, want 3"; cat "$tmp/out"; }
for a in c-header cmake perl; do
  line=$(grep "^| $a | lora |" "$tmp/out")
  # | consumer | kind | prefix | own | ttft | speed-up | SCD | raw | exact | dlogit |
  exact=$(echo "$line" | awk -F'|' '{gsub(/^ +| +$/, "", $10); print $10}')
  scd=$(echo "$line" | awk -F'|' '{gsub(/^ +| +$/, "", $8); print $8}')
  [ "$exact" = "1.000, 0.0e+00" ] && ok "$a: its own prefill restored raw is exact ($exact)" \
    || bad "$a: exact restore '$exact', want '1.000, 0.0e+00'"
  echo "$scd" | grep -Eq '^[01]\.[0-9]{3}, [-+][0-9.]+%, [0-9.]+$' \
    && ok "$a: SCD figures are numbers ($scd)" || bad "$a: SCD figures '$scd'"
done
grep -q "adapters on one context" "$tmp/out" && ok "it measures the adapter switch" \
  || bad "no adapter-switch line"
grep -q "skipped" "$tmp/out" && bad "an adapter was skipped: $(grep skipped "$tmp/out")" \
  || ok "no adapter skipped"

cli_expect_done
