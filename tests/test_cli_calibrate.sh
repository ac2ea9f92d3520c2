#!/usr/bin/env bash
# test_cli_calibrate.sh SCDB — `scdb calibrate` for an operator's own
# adapter or model (issue 42): one the project did not train (copied under
# another name beside no TRAINING.json and no held-out text) is refused
# before any work with the option to pass, and `--texts FILE` alone is
# enough: its held-back KL windows come from that text, never from the
# statistics' bytes (nor a project model's own).  And the progress a log
# reads (stderr to a file): whole lines, a bounded count; --engine
# llama.cpp refused for model directories.  Tiny settings:
# seconds, not quality.
set -u
scdb="$1"
. "$(dirname "$0")/helpers/cli_expect.sh"

data="${SCDB_DATA:-$(dirname "$scdb")/../share/scdb}"
data=$(cd -P "$data" && pwd)
cb="$data/codebooks/base.safetensors"

# an adapter and a model of the operator's: the shipped perl adapter and
# python model under other names in a folder of their own (its base by
# absolute path), so no manifest of the project lists them
mine="$tmp/mine"
mkdir -p "$mine/myperl"
cp "$data/adapters/perl/adapter_model.safetensors" "$mine/myperl/"
sed "s#\"base_model_name_or_path\": *\"base\"#\"base_model_name_or_path\": \"$data/models/base\"#" \
  "$data/adapters/perl/adapter_config.json" >"$mine/myperl/adapter_config.json"
cp -r "$data/models/python" "$mine/mypy"
txt="$tmp/my-training-text.txt"   # the operator's text, outside the data folder
cp "$data/heldout/perl.txt" "$txt"
head -c 3000 "$txt" >"$tmp/short.txt"
fleet="--codebook $cb --producer $data/models/base --device cpu"
add="$fleet --lora-pairs --shared $data/pairs/base__fleet.safetensors --consumer $mine/myperl"

# 1. no text: refused at once (before any statistics window), naming the
# consumer, where its text was looked for, and what to pass
expect 2 "calibrate: an adapter the project did not train, no text: refused" -- "$scdb" calibrate $add -o "$tmp/o1"
grep -q "consumer 'myperl' ($mine/myperl) has no calibration text here: no training text: domain 'myperl' of $mine/TRAINING.json" "$tmp/err" \
  && grep -q "pass the training text: --texts FILE" "$tmp/err" \
  && ok "calibrate: says which consumer lacks text, where it looked, and to pass --texts FILE" \
  || { bad "calibrate: the no-text message"; cat "$tmp/err"; }
! grep -q "^  statistics:\|statistics windows (" "$tmp/err" \
  && ok "calibrate: refused before any statistics window" || { bad "calibrate: worked before refusing"; cat "$tmp/err"; }
[ ! -e "$tmp/o1/pairs" ] && ok "calibrate: nothing written" || bad "calibrate: wrote before refusing"
expect 2 "calibrate --domains: an adapter without held-back text: refused" -- "$scdb" calibrate $add --domains prose \
  -o "$tmp/o1"
grep -q "consumer 'myperl' .* has no text here for its held-back KL windows" "$tmp/err" \
  && grep -q "pass --heldback-text FILE" "$tmp/err" && ! grep -q "^  statistics:" "$tmp/err" \
  && ok "calibrate --domains: says to pass --heldback-text FILE, before any work" \
  || { bad "calibrate --domains: the no-held-back-text message"; cat "$tmp/err"; }

# 2. --texts alone is enough: statistics from its start, the held-back
# windows right after them (bytes 1536-1921 with 4 windows of 384)
expect 0 "calibrate --lora-pairs --shared: an operator's adapter with --texts alone" -- "$scdb" calibrate $add \
  --texts "$txt" --windows 4 --eval-windows 1 -o "$tmp/o2"
grep -q "statistics from $txt (1536 bytes; held-back text after them, kept out)" "$tmp/err" \
  && grep -q "1 held-back KL windows for 'myperl' from bytes 1536-1921 of $txt" "$tmp/err" \
  && ok "calibrate: held-back windows from the operator's text, after the statistics' bytes" \
  || { bad "calibrate: held-back windows from --texts"; cat "$tmp/err"; }
[ -s "$tmp/o2/pairs/base__myperl.safetensors" ] && grep -q "^lora pair base -> myperl: .*held-back KL" "$tmp/out" \
  && ok "calibrate: the operator's adapter gets its pair (loaded back by the run)" \
  || { bad "calibrate: no pair for the operator's adapter"; cat "$tmp/out"; }
# the progress a log reads: whole lines (no '\r'), at most the count that
# scdb_progress promises for a report of T seconds (1 + min(10, T) + T / 5,
# T read off the log, so a slow machine or a sanitizer build is held to the
# same rule), and never one a step when the steps outnumber that bound
# (unit-tested with a fake clock in test_common)
stat_s=$(sed -n 's/^calibrate: [0-9]* statistics windows (\([0-9.]*\) s.*/\1/p' "$tmp/err" | head -1)
stat_max=$(awk -v t="${stat_s:-0}" 'BEGIN { m = (t < 10 ? t : 10); printf "%d", 1 + int(m + 0.999) + int(t / 5) }')
if ! grep -q $'\r' "$tmp/err" && [ -n "$stat_s" ] \
   && [ "$(grep -c '^  statistics: [0-9]* windows ([0-9]* tokens)$' "$tmp/err")" -ge 1 ] \
   && [ "$(grep -c '^  statistics:' "$tmp/err")" -le "$stat_max" ]; then
  ok "calibrate: stderr to a file has whole progress lines, a bounded count"
else bad "calibrate: progress in a log"; cat -A "$tmp/err" | head -40; fi

# 3. --heldback-text: the held-back windows from its last bytes; the same
# file as --texts keeps them out of the statistics (3000 - 385 = 2615)
expect 0 "calibrate: --heldback-text, the same file as --texts" -- "$scdb" calibrate $add --texts "$tmp/short.txt" \
  --heldback-text "$tmp/short.txt" --windows 8 --eval-windows 1 -o "$tmp/o3"
grep -q "statistics from $tmp/short.txt (2615 bytes; held-back text after them, kept out)" "$tmp/err" \
  && grep -q "from the last 385 bytes of $tmp/short.txt" "$tmp/err" \
  && grep -q "^calibrate: 6 statistics windows" "$tmp/err" \
  && ok "calibrate --heldback-text: its last bytes, kept out of the statistics" \
  || { bad "calibrate --heldback-text"; cat "$tmp/err"; }
head -c 2000 "$txt" >"$tmp/tiny.txt"
expect 2 "calibrate: --texts too short for statistics and held-back windows: refused" -- "$scdb" calibrate $add \
  --texts "$tmp/tiny.txt" -o "$tmp/o4"
grep -q "it needs at least 2694 bytes" "$tmp/err" && ok "calibrate: says how long the text must be" \
  || { bad "calibrate: too-short message"; cat "$tmp/err"; }

# 4. a full pair for a model outside the family's manifests; and a codebook
# fit with it as a consumer: refused before any work, then --texts enough
expect 2 "calibrate --codebook: a model the project did not train, no text: refused" -- "$scdb" calibrate $fleet \
  --consumer "$mine/mypy" -o "$tmp/o5"
grep -q "consumer 'python' ($mine/mypy) has no calibration text here: no training text (domain 'python' of $mine/TRAINING.json) and no held-out text $mine/../heldout/python.txt" "$tmp/err" \
  && grep -q -- "--texts FILE" "$tmp/err" && ok "calibrate --codebook: the full model's message" \
  || { bad "calibrate --codebook: the full model's message"; cat "$tmp/err"; }
expect 0 "calibrate --codebook: a model the project did not train with --texts alone" -- "$scdb" calibrate $fleet \
  --consumer "$mine/mypy" --texts "$txt" --windows 3 --steps 4 --eval-windows 1 -o "$tmp/o6"
grep -q "1 held-back KL windows for 'python' from bytes 1152-1537 of $txt" "$tmp/err" \
  && [ -s "$tmp/o6/pairs/base__python.safetensors" ] \
  && ok "calibrate --codebook: the full pair, its held-back windows from the operator's text" \
  || { bad "calibrate --codebook: full pair with --texts"; cat "$tmp/err"; }
expect 2 "calibrate: a codebook fit, a consumer without text: refused" -- "$scdb" calibrate --device cpu \
  --producer "$data/models/base" --consumer "$mine/mypy" --ranks 8,8,8 --patch-layers 1 -o "$tmp/o7"
grep -q "consumer 'python' ($mine/mypy) has no calibration text here" "$tmp/err" && ! grep -q "^  statistics:" "$tmp/err" \
  && ok "calibrate: a codebook fit says so before any work" || { bad "calibrate: codebook fit message"; cat "$tmp/err"; }

# 5. a project model's own held-back windows (the end of its held-out
# text's first half) are never statistics either: that file as --texts, read
# past them, is refused before any work
expect 2 "calibrate: --texts reading a consumer's own held-back windows: refused" -- "$scdb" calibrate $fleet \
  --consumer "$data/models/python" --texts "$data/heldout/python.txt" -o "$tmp/o8"
grep -q "is the held-out text of consumer 'python', whose held-back KL windows are its bytes 46842-49152" "$tmp/err" \
  && ! grep -q "^  statistics:" "$tmp/err" && ok "calibrate: says the statistics would read the held-back windows" \
  || { bad "calibrate: overlap message"; cat "$tmp/err"; }

# 6. --engine llama.cpp (issue 39): GGUF files only, and only in a build
# with llama.cpp -- refused either way for model directories, saying which
expect 2 "calibrate --engine llama.cpp on model directories: refused" -- "$scdb" calibrate --engine llama.cpp \
  --producer "$data/models/base" --consumer "$data/models/code" --ranks 8,8,8 --patch-layers 1 --device cpu \
  --texts "$txt" -o "$tmp/o9"
{ grep -q "'base' ($data/models/base) is not a GGUF file" "$tmp/err" \
    || grep -q "this build has no llama.cpp (scripts/install-llama.sh" "$tmp/err"; } \
  && ! grep -q "^  statistics:" "$tmp/err" && ok "calibrate --engine llama.cpp: says why (not GGUF, or no llama.cpp)" \
  || { bad "calibrate --engine llama.cpp message"; cat "$tmp/err"; }
expect 2 "calibrate --engine: an unknown engine" -- "$scdb" calibrate --engine vllm --producer "$data/models/base" \
  --consumer "$data/models/code" --ranks 8,8,8 --patch-layers 1 -o "$tmp/o10"
grep -q "engine wants auto, llama.cpp or reference, not 'vllm'" "$tmp/err" && ok "calibrate --engine: names the choices" \
  || { bad "calibrate --engine vllm message"; cat "$tmp/err"; }
expect 2 "calibrate --threads 0: refused" -- "$scdb" calibrate --threads 0 --producer "$data/models/base" \
  --consumer "$data/models/code" --ranks 8,8,8 --patch-layers 1 -o "$tmp/o11"
grep -q -- "--threads '0': out of range (want \[1, 256\])" "$tmp/err" && ok "calibrate --threads 0: says the range" \
  || { bad "calibrate --threads 0 message"; cat "$tmp/err"; }
expect 2 "calibrate --threads 2x: refused" -- "$scdb" calibrate --threads 2x --producer "$data/models/base" \
  --consumer "$data/models/code" --ranks 8,8,8 --patch-layers 1 -o "$tmp/o12"
grep -q -- "--threads '2x': junk after the number" "$tmp/err" && ok "calibrate --threads 2x: says what is wrong" \
  || { bad "calibrate --threads 2x message"; cat "$tmp/err"; }

cli_expect_done
