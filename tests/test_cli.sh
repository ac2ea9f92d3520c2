#!/usr/bin/env bash
# test_cli.sh SCDB — the scdb command's front door: help texts, usage errors,
# and the model family report end to end (small sample, JSON checked).
set -u
scdb="$1"
. "$(dirname "$0")/helpers/cli_expect.sh"

expect 0 "scdb --help" -- "$scdb" --help
grep -q "models" "$tmp/out" && ok "help lists models" || bad "help lists models"
expect 2 "no command is a usage error" -- "$scdb"
expect 2 "unknown command is a usage error" -- "$scdb" frobnicate
grep -q "unknown command" "$tmp/err" && ok "unknown command says so" || bad "unknown command says so"
for sub in demo models bench calibrate train-policy serve put lookup get stats fingerprint audit; do
  expect 0 "scdb $sub --help" -- "$scdb" $sub --help
done
expect 2 "models: unknown option" -- "$scdb" models --bogus
expect 2 "models: bad --max-bytes" -- "$scdb" models --max-bytes 1
expect 1 "models: missing data dir" -- "$scdb" models --data "$tmp/nothing"
expect 2 "bench: unknown benchmark" -- "$scdb" bench nosuch
# bench python (issue 13): its front door; the run itself is a bench
expect 0 "bench python --help" -- "$scdb" bench python --help
grep -q "py_lookup_us" "$tmp/out" && ok "bench python --help names its JSON fields" \
  || bad "bench python --help names its JSON fields"
expect 2 "bench python: --prefix not whole blocks" -- "$scdb" bench python --prefix 100
expect 2 "bench python: bad --iters" -- "$scdb" bench python --iters -3
expect 2 "bench python: stray argument" -- "$scdb" bench python extra
expect 1 "bench python: no interpreter" -- "$scdb" bench python --python "$tmp/nope"
grep -q "no interpreter at" "$tmp/err" && ok "bench python: missing interpreter says so" \
  || bad "bench python: missing interpreter says so"
# the remote tier (issue 12): documented flags, the fleet bench's usage
"$scdb" serve --help | grep -q -- "--remote-cluster" && ok "serve --help lists [remote]" \
  || bad "serve --help lists [remote]"
expect 0 "scdb bench cluster --help" -- "$scdb" bench cluster --help
grep -q -- "--route rr|session" "$tmp/out" && ok "bench cluster --help lists --route" \
  || bad "bench cluster --help lists --route"
expect 2 "bench cluster: bad --route" -- "$scdb" bench cluster --route nearest
# the trace ships in data/traces (issue 26): a missing one is an error that
# says where it belongs, never a silent switch to the synthetic trace
expect 1 "bench store: a missing trace is an error" -- env SCDB_DATA="$tmp/nothing" "$scdb" bench store
grep -q "nothing/traces/mooncake_synthetic_trace.jsonl is missing.*--synthetic" "$tmp/err" \
  && ok "bench store: the missing trace's message names it and --synthetic" \
  || { bad "bench store: the missing trace's message names it and --synthetic"; cat "$tmp/err"; }
expect 2 "serve: a [remote] prefix with a hash tag" -- "$scdb" serve --data-dir "$tmp/sr" \
  --endpoint "ipc://$tmp/r.sock" --remote-cluster 127.0.0.1:1 --remote-key-prefix "a{b}"
grep -q "hash tag" "$tmp/err" && ok "serve: the hash-tag refusal says why" \
  || bad "serve: the hash-tag refusal says why"

# option values (issue 26): one range-checked parser (common/parse_num.c)
# for the command and the benches; a bad value is a usage error whose
# message names the option and says what is wrong with it
badval() {  # badval MESSAGE -- command...
  local want=$1; shift 2
  expect 2 "$* is a usage error" -- "$@"
  grep -qF -- "$want" "$tmp/err" && ok "$*: says '$want'" || { bad "$*: says '$want'"; cat "$tmp/err"; }
}
badval "--windows 'abc': not an integer" -- "$scdb" bench quality --windows abc
badval "--prefix '12x': junk after the number ('x')" -- "$scdb" bench quality --prefix 12x
badval "--reps '0': out of range" -- "$scdb" bench quality --reps 0
badval "--layers '99999999999': out of range" -- "$scdb" bench store --layers 99999999999
badval "--seed '-1': not an unsigned integer" -- "$scdb" bench store --seed -1
for pl in "codes,raw,raw" "codes,,raw" "raw,raw" "foo" ""; do
  badval "--payload '$pl': want codes, raw or both" -- "$scdb" bench store --payload "$pl"
done
badval "--reps '0': out of range (want [1, 1000])" -- "$scdb" bench kernels --reps 0
badval "--seconds: empty value" -- "$scdb" bench broker --seconds ""
badval "--steps '99999999999999999999': overflows" -- "$scdb" bench session --steps 99999999999999999999
badval "--brokers '1': out of range (want [2, 16])" -- "$scdb" bench cluster --brokers 1
# bench store and bench cluster take the payload shape through one parser
# (bench.h "payload shape"): the same values refused with the same words;
# raw KV's options are bench store's alone
for b in store cluster; do
  badval "--block-tokens '0': out of range (want [1, 1048576])" -- "$scdb" bench $b --block-tokens 0
  badval "--codes-scale '0': out of range" -- "$scdb" bench $b --codes-scale 0
  badval "--rank-k 'x': not an unsigned integer" -- "$scdb" bench $b --rank-k x
done
badval "--raw-scale '-1': out of range" -- "$scdb" bench store --raw-scale -1
expect 2 "bench cluster: --kv-dim is bench store's alone" -- "$scdb" bench cluster --kv-dim 8
badval "--iters '-3': out of range" -- "$scdb" bench python --iters -3
badval "--windows '-3': out of range" -- "$scdb" calibrate --windows -3
badval "--gen 'x': not an integer" -- "$scdb" demo --gen x
badval "--window '5.5': junk after the number ('.5')" -- "$scdb" models --window 5.5
badval "--updates '1e3': junk after the number ('e3')" -- "$scdb" train-policy --updates 1e3 -o "$tmp/p.safetensors"
# train-policy's comma lists: an empty field is a usage error (strtok_r
# folded '0,,0.5' into 2 window choices, '0.1,,0.5' into a budget range)
for arg in "--windows 0,,0.5" "--windows 0.5," "--val-budgets ,0.25" "--budget-range 0.1,,0.5" \
           "--imit-train net,,skip" "--models base," "--domains ,prose" "--inputs age,,rank_mass"; do
  expect 2 "train-policy $arg: an empty field is a usage error" -- "$scdb" train-policy $arg \
    --suite "$tmp/nothing.json" -o "$tmp/p.safetensors"
done

# --device auto|cpu|cuda (issue 7): listed in the help texts, bad values are
# usage errors, commands without a CUDA path refuse cuda and say why
for sub in serve calibrate demo "bench quality" "bench kernels"; do
  "$scdb" $sub --help 2>&1 | grep -q -- "--device" && ok "$sub --help lists --device" \
    || bad "$sub --help lists --device"
done
expect 2 "serve: bad --device" -- "$scdb" serve --device gpu --data-dir "$tmp/sd"
grep -q "auto, cpu or cuda" "$tmp/err" && ok "serve: bad --device says what is allowed" \
  || bad "serve: bad --device says what is allowed"
expect 2 "calibrate: bad --device" -- "$scdb" calibrate --device CUDA
expect 2 "bench quality: bad --device" -- "$scdb" bench quality --device tpu
expect 2 "demo: bad --device" -- "$scdb" demo --device 1
# (issue 19) calibrate, bench quality and demo have CUDA paths: without a
# device, cuda is refused with the reason (never a silent CPU run)
if ! nvidia-smi -L >/dev/null 2>&1; then
  for sub in "bench quality" demo calibrate; do
    args=()
    [ "$sub" = calibrate ] && args=(--producer "$tmp/no-model" --consumer "$tmp/no-model" \
      --ranks 8,12,16 --patch-layers 1 -o "$tmp/cal")
    expect 1 "$sub: --device cuda without a device" -- "$scdb" $sub --device cuda "${args[@]}"
    grep -qE "cuda requested but (no CUDA device answers|this build has no CUDA backend)" "$tmp/err" \
      && ok "$sub: cuda refusal says why" || bad "$sub: cuda refusal says why"
  done
fi
# serve --device cpu starts, logs its choice, and stops on SIGTERM
"$scdb" serve --device cpu --data-dir "$tmp/sd" --endpoint "ipc://$tmp/b.sock" \
  --model m:2:1:8:64 --lookup-index 0 --gpu-hot-capacity 1MiB >"$tmp/serve.out" 2>"$tmp/serve.err" &
spid=$!
# ready = the "serving" line, logged once the event loop takes signals; the
# bound only catches a broker that never gets there
for _ in $(seq 1 600); do
  grep -q "serving ipc://" "$tmp/serve.err" && break
  kill -0 $spid 2>/dev/null || break
  sleep 0.1
done
grep -q "device: cpu requested" "$tmp/serve.err" && ok "serve --device cpu logs its choice" \
  || { bad "serve --device cpu logs its choice"; cat "$tmp/serve.err"; }
grep -q "gpu_hot_capacity 1048576 ignored: the broker decodes on the CPU" "$tmp/serve.err" \
  && ok "serve --device cpu ignores gpu_hot_capacity and says so" \
  || bad "serve --device cpu ignores gpu_hot_capacity and says so"
kill -TERM $spid 2>/dev/null; wait $spid; code=$?
[ $code -eq 0 ] && ok "serve --device cpu stops cleanly" || bad "serve --device cpu (exit $code)"
# SIGTERM during start-up (after its first log line, before "serving"):
# taken when the event loop is ready, a clean exit 0, never death by the
# signal (143)
"$scdb" serve --device cpu --data-dir "$tmp/sd3" --endpoint "ipc://$tmp/b3.sock" \
  --model m:2:1:8:64 --lookup-index 0 >/dev/null 2>"$tmp/serve3.err" &
spid=$!
for _ in $(seq 1 600); do
  grep -q "device: cpu requested" "$tmp/serve3.err" 2>/dev/null && break
  kill -0 $spid 2>/dev/null || break
  sleep 0.01
done
kill -TERM $spid 2>/dev/null; wait $spid; code=$?
[ $code -eq 0 ] && ok "serve: SIGTERM during start-up is a clean stop" \
  || { bad "serve: SIGTERM during start-up (exit $code)"; cat "$tmp/serve3.err"; }
if ! nvidia-smi -L >/dev/null 2>&1; then
  "$scdb" serve --device cuda --data-dir "$tmp/sd2" --endpoint "ipc://$tmp/b2.sock" \
    --model m:2:1:8:64 >"$tmp/out" 2>"$tmp/err"; code=$?
  { [ $code -eq 1 ] || [ $code -eq 2 ]; } && grep -q "cuda requested" "$tmp/err" \
    && ok "serve --device cuda without a device refuses to start (exit $code)" \
    || { bad "serve --device cuda without a device (exit $code)"; cat "$tmp/err"; }
fi

# issue 20 item 9: start-up errors once, not doubled; a start refused for a
# taken endpoint creates no store; --help lists kinds and decoders, one exit
# status paragraph; clear messages for an empty payload and a negative number
printf '[model base]\nconfig = %s/nonexistent/config.json\n' "$tmp" > "$tmp/bad.ini"
"$scdb" serve --config "$tmp/bad.ini" --data-dir "$tmp/sd4" --endpoint "ipc://$tmp/b4.sock" \
  >"$tmp/out" 2>"$tmp/err"; code=$?
[ $code -eq 2 ] && [ "$(grep -c 'cannot start' "$tmp/err")" -eq 1 ] \
  && [ "$(grep -o 'nonexistent/config.json' "$tmp/err" | wc -l)" -eq 1 ] \
  && ok "serve: a start-up error is one line, its message once" \
  || { bad "serve: start-up error (exit $code)"; cat "$tmp/err"; }
"$scdb" serve --device cpu --data-dir "$tmp/sd5" --endpoint "ipc://$tmp/b5.sock" \
  --model m:2:1:8:64 --lookup-index 0 >/dev/null 2>"$tmp/serve5.err" &
spid=$!
for _ in $(seq 1 600); do
  grep -q "serving ipc://" "$tmp/serve5.err" && break
  kill -0 $spid 2>/dev/null || break
  sleep 0.1
done
"$scdb" serve --device cpu --data-dir "$tmp/sd6" --endpoint "ipc://$tmp/b5.sock" \
  --model m:2:1:8:64 >/dev/null 2>"$tmp/err"; code=$?
[ $code -eq 1 ] && grep -q "another broker is listening" "$tmp/err" && [ ! -e "$tmp/sd6" ] \
  && ok "serve: endpoint in use is refused before any store is created" \
  || { bad "serve: endpoint in use (exit $code, store dir $(ls -d "$tmp/sd6" 2>/dev/null))"; cat "$tmp/err"; }
kill -TERM $spid 2>/dev/null; wait $spid
"$scdb" serve --help >"$tmp/out"
grep -q "kind = raw | scd" "$tmp/out" && grep -q "decoder = raw | scd" "$tmp/out" \
  && [ "$(grep -ci '^exit \(status\|codes\)' "$tmp/out")" -eq 1 ] \
  && ok "serve --help: kinds, decoders, one exit status paragraph" \
  || bad "serve --help: kinds, decoders, one exit status paragraph"
echo hello > "$tmp/p.txt"
expect 2 "put: an empty payload is a usage error" -- "$scdb" put --model m --text "$tmp/p.txt" --payload /dev/null
grep -q "is empty" "$tmp/err" && ok "put: an empty payload says so" || { bad "put: empty payload message"; cat "$tmp/err"; }
expect 2 "get: --pos0 -1 is a usage error" -- "$scdb" get --model m --text "$tmp/p.txt" --pos0 -1
grep -q -- "--pos0 -1: must be 0 or more" "$tmp/err" && ok "get: --pos0 -1 says what is allowed" \
  || { bad "get: --pos0 -1 message"; cat "$tmp/err"; }
expect 2 "get: --patch-layers with --copy is a usage error" -- "$scdb" get --model m --text "$tmp/p.txt" \
  --patch-layers 1 --copy
grep -q -- "not with --copy" "$tmp/err" && ok "get: --patch-layers with --copy says why" \
  || { bad "get: --patch-layers --copy message"; cat "$tmp/err"; }
"$scdb" get --help | grep -q -- "--patch-layers K" && ok "get --help: --patch-layers" \
  || bad "get --help: --patch-layers"

# issue 16 items 2-3: weights fingerprints, the late-added calibration's bad
# input, and scdb audit against a running broker with the family
data="${SCDB_DATA:-$(dirname "$scdb")/../share/scdb}"
expect 0 "fingerprint: a model directory" -- "$scdb" fingerprint "$data/models/code" "$data/models/python"
[ "$(grep -Ec '^[0-9a-f]{32}  ' "$tmp/out")" -eq 2 ] && ok "fingerprint: 32 hex digits per directory" \
  || { bad "fingerprint output"; cat "$tmp/out"; }
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 "$data/tools/weights_fp.py" "$data/models/code" "$data/models/python" >"$tmp/py_fp" 2>&1
  cmp -s "$tmp/out" "$tmp/py_fp" && ok "fingerprint: tools/weights_fp.py (Python, from FORMATS.md) agrees" \
    || { bad "fingerprint: tools/weights_fp.py agrees"; cat "$tmp/out" "$tmp/py_fp"; }
fi
expect 1 "fingerprint: a missing directory" -- "$scdb" fingerprint "$tmp/nothing"
grep -q "nothing/config.json: no such file" "$tmp/err" && ok "fingerprint: says which file is missing" \
  || { bad "fingerprint: missing-file message"; cat "$tmp/err"; }
expect 2 "fingerprint: no directory" -- "$scdb" fingerprint
expect 2 "fingerprint: unknown option" -- "$scdb" fingerprint --bogus
# issue 23 item 0: broad calibration text, --domains
expect 0 "calibrate --help" -- "$scdb" calibrate --help
grep -q -- "--domains fleet|D1,D2" "$tmp/out" && ok "calibrate --help: --domains" || bad "calibrate --help: --domains"
expect 1 "calibrate --domains: an unknown domain" -- "$scdb" calibrate --producer "$data/models/base" \
  --consumer "$data/models/manpages" --ranks 8,12,12 --patch-layers 1 --domains english,nosuch -o "$tmp/cald"
grep -q "'nosuch' is not a training domain of the family (english, " "$tmp/err" \
  && ok "calibrate --domains: names the unknown domain and the known ones" \
  || { bad "calibrate --domains: unknown-domain message"; cat "$tmp/err"; }
expect 1 "calibrate --domains with --texts" -- "$scdb" calibrate --producer "$data/models/base" \
  --consumer "$data/models/manpages" --ranks 8,12,12 --patch-layers 1 --domains fleet \
  --texts "$data/heldout/english.txt" -o "$tmp/cald"
grep -q "give one" "$tmp/err" && ok "calibrate --domains with --texts: says to give one" \
  || { bad "calibrate --domains/--texts message"; cat "$tmp/err"; }
[ ! -e "$tmp/cald/codebooks" ] && ok "calibrate --domains: nothing written on refusal" || bad "calibrate wrote $tmp/cald"
# train-policy --age-profile (issue 27): the policy's file name goes into
# the JSON as a string, escaped, whatever characters it holds
odd="$tmp/a\"b\\c.safetensors"
cp "$data/policies/distillcache_base.safetensors" "$odd"
expect 0 "train-policy --age-profile: a small profile" -- "$scdb" train-policy --age-profile "$tmp/age.json" \
  --profile "$odd" --models base --domains prose --val-budgets 0.5 --val-windows 1 -o "$tmp/unused.safetensors"
/usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
assert [p["label"] for p in d["policies"]] == [sys.argv[2]], d["policies"]
assert d["budgets"] == [0.5] and len(d["policies"][0]["profile"]) == 1, d' "$tmp/age.json" 'a"b\c.safetensors' \
  && ok "train-policy --age-profile: valid JSON, the odd file name as its label" \
  || bad "train-policy --age-profile: valid JSON, the odd file name as its label"
expect 2 "train-policy: --profile without --age-profile" -- "$scdb" train-policy --profile "$odd" \
  -o "$tmp/unused.safetensors"
grep -q -- "--profile is for --age-profile" "$tmp/err" && ok "train-policy: --profile alone says what it is for" \
  || bad "train-policy: --profile alone says what it is for"
expect 1 "train-policy --age-profile: an unknown model" -- "$scdb" train-policy --age-profile "$tmp/age2.json" \
  --profile "$odd" --models nosuch --domains prose --val-budgets 0.5 --val-windows 1 -o "$tmp/unused.safetensors"
[ ! -e "$tmp/age2.json" ] && ok "train-policy --age-profile: nothing left behind on failure" \
  || bad "train-policy --age-profile: $tmp/age2.json left behind on failure"
expect 1 "train-policy --age-profile: a window longer than the model's context" -- "$scdb" train-policy \
  --age-profile "$tmp/age3.json" --profile "$odd" --models base --domains prose --val-budgets 0.5 \
  --val-windows 1 --prefill 4000 -o "$tmp/unused.safetensors"
grep -q "prefill 4000 + steps 256 exceed .*context of" "$tmp/err" \
  && ok "train-policy --age-profile: the too-long window's message names the context" \
  || { bad "train-policy --age-profile: the too-long window's message"; cat "$tmp/err"; }
expect 2 "train-policy: an --imit-* option without --imitate" -- "$scdb" train-policy --imit-epochs 3 \
  -o "$tmp/unused.safetensors"
grep -q -- "--imit-epochs is for --imitate R" "$tmp/err" && ok "train-policy: --imit-epochs alone says what it is for" \
  || bad "train-policy: --imit-epochs alone says what it is for"
# the per-head scorer's options (issue 27): each refused without --heads, bad values named
expect 2 "train-policy: a --heads-* option without --heads" -- "$scdb" train-policy --heads-pool 10 \
  -o "$tmp/unused.safetensors"
grep -q -- "--heads-pool is for --heads G" "$tmp/err" && ok "train-policy: --heads-pool alone says what it is for" \
  || bad "train-policy: --heads-pool alone says what it is for"
expect 2 "train-policy: --heads-short without --heads" -- "$scdb" train-policy --heads-short 0.5 \
  -o "$tmp/unused.safetensors"
grep -q -- "--heads-short is for --heads G" "$tmp/err" && ok "train-policy: --heads-short alone says what it is for" \
  || bad "train-policy: --heads-short alone says what it is for"
for arg in "--heads-windows 0,,0.5" "--heads-windows 0.5,0.25" "--heads-windows 0,1" \
           "--heads-range 0.2,0.1" "--heads-range 0.1,,0.2" "--heads-pairs 0" "--heads-pairs 65" \
           "--heads-sigma 0" "--heads-threads 17" "--heads -1" "--heads-split-max 0" \
           "--heads-split-max 1.5" "--heads-split-max 0.3x" "--heads-split-max nan" \
           "--heads-top1 -1" "--heads-top1 101" "--heads-top1 x" "--heads-short -0.1" \
           "--heads-short 1.01" "--heads-short half"; do
  expect 2 "train-policy --heads 3 $arg: a usage error" -- "$scdb" train-policy --heads 3 $arg \
    --suite "$tmp/nothing.json" -o "$tmp/p.safetensors"
  # the message names the option given, not its neighbour in the table
  grep -q -- "${arg%% *}[ :']" "$tmp/err" && ok "train-policy $arg: the message names ${arg%% *}" \
    || { bad "train-policy $arg: the message names ${arg%% *}"; cat "$tmp/err"; }
done
# more window choices for a fitted scorer: a superset of its own, or refused by name
expect 2 "train-policy --init v6 --heads-windows without its choices" -- "$scdb" train-policy \
  --init "$data/policies/distillcache_base.safetensors" --heads 3 --heads-windows 0,0.5 \
  --suite "$data/evict_suite/manifest.json" -o "$tmp/p.safetensors"
grep -q "window choice 0.125 is not among the new ones" "$tmp/err" \
  && ok "train-policy --heads-windows: names the start's choice it lacks" \
  || { bad "train-policy --heads-windows: the missing choice's message"; cat "$tmp/err"; }
expect 2 "train-policy: more episodes per generation than the pool" -- "$scdb" train-policy --heads 3 \
  --heads-pool 4 --heads-episodes 8 -o "$tmp/p.safetensors"
grep -q -- "--heads-episodes 8 exceeds --heads-pool 4" "$tmp/err" \
  && ok "train-policy: episodes over the pool says so" || bad "train-policy: episodes over the pool message"
cb="$data/codebooks/base.safetensors"
expect 2 "calibrate --codebook: a codebook option is refused" -- "$scdb" calibrate --codebook "$cb" \
  --consumer "$data/models/python" --ranks 8,12,16 -o "$tmp/cal"
grep -q "codebook is frozen" "$tmp/err" && ok "calibrate --codebook: says the codebook is frozen" \
  || { bad "calibrate --codebook: frozen message"; cat "$tmp/err"; }
expect 2 "calibrate --codebook: no --consumer" -- "$scdb" calibrate --codebook "$cb" -o "$tmp/cal"
expect 1 "calibrate --codebook: a missing file" -- "$scdb" calibrate --codebook "$tmp/none.safetensors" \
  --consumer "$data/models/python" -o "$tmp/cal"
expect 1 "calibrate --codebook: a pair is not a codebook" -- "$scdb" calibrate \
  --codebook "$data/pairs/base__code.safetensors" --consumer "$data/models/python" -o "$tmp/cal"
grep -q "not an scdb codebook" "$tmp/err" && ok "calibrate --codebook: says it is not a codebook" \
  || { bad "calibrate --codebook: not-a-codebook message"; cat "$tmp/err"; }
mkdir -p "$tmp/fam" && ln -s "$data/models/python" "$tmp/fam/python"
expect 1 "calibrate --codebook: no producer beside the consumer" -- "$scdb" calibrate --codebook "$cb" \
  --consumer "$tmp/fam/python" -o "$tmp/cal"
grep -q "give --producer DIR" "$tmp/err" && ok "calibrate --codebook: asks for --producer" \
  || { bad "calibrate --codebook: --producer hint"; cat "$tmp/err"; }
expect 1 "calibrate --codebook: other producer weights" -- "$scdb" calibrate --codebook "$cb" \
  --producer "$data/models/code" --consumer "$data/models/python" -o "$tmp/cal"
grep -q "was fitted for producer weights" "$tmp/err" && ok "calibrate --codebook: names the producer weights" \
  || { bad "calibrate --codebook: producer mismatch message"; cat "$tmp/err"; }
[ ! -e "$tmp/cal" ] && ok "calibrate --codebook: nothing written on refusal" || bad "calibrate wrote $tmp/cal"
expect 2 "calibrate --restamp: no --codebook" -- "$scdb" calibrate --restamp "$data/pairs/base__code.safetensors" \
  --consumer "$data/models/code" -o "$tmp/rs"
expect 1 "calibrate --restamp: a tensor fingerprint already" -- "$scdb" calibrate --restamp \
  "$data/pairs/base__code.safetensors" --codebook "$cb" --consumer "$data/models/code" -o "$tmp/rs"
grep -q "tensor fingerprint already" "$tmp/err" && ok "calibrate --restamp: says so" \
  || { bad "calibrate --restamp message"; cat "$tmp/err"; }
# issue 25 item 1: the shipped codebook carries the tensor fingerprint of its producer
expect 1 "calibrate --restamp-codebook: the shipped codebook is re-stamped already" -- "$scdb" calibrate \
  --restamp-codebook "$cb" --producer "$data/models/base" -o "$tmp/rs"
grep -q "producer_fp $("$scdb" fingerprint "$data/models/base" | cut -c1-32) is a tensor fingerprint already" \
  "$tmp/err" && ok "calibrate --restamp-codebook: names the fingerprint it has" \
  || { bad "calibrate --restamp-codebook message"; cat "$tmp/err"; }
expect 2 "calibrate --restamp-codebook: no --producer" -- "$scdb" calibrate --restamp-codebook "$cb" -o "$tmp/rs"

py="$data/models/python"
expect 2 "audit: no --consumer" -- "$scdb" audit --codebook base-scd
expect 2 "audit: no --codebook" -- "$scdb" audit --consumer "$py"
for v in 0 -1 abc 3x 257 ""; do
  expect 2 "audit: --prefixes '$v'" -- "$scdb" audit --consumer "$py" --codebook base-scd --prefixes "$v"
done
grep -q -- "--prefixes : want a whole number in \[1, 256\]" "$tmp/err" && ok "audit: bad --prefixes says what is allowed" \
  || { bad "audit: bad --prefixes message"; cat "$tmp/err"; }
expect 2 "audit: --prefixes without a value" -- "$scdb" audit --consumer "$py" --codebook base-scd --prefixes
expect 2 "audit: --cont 0" -- "$scdb" audit --consumer "$py" --codebook base-scd --cont 0
expect 2 "audit: --store without --producer" -- "$scdb" audit --consumer "$py" --codebook base-scd --store
expect 2 "audit: unknown option" -- "$scdb" audit --consumer "$py" --codebook base-scd --bogus 1
expect 1 "audit: a missing consumer directory" -- "$scdb" audit --consumer "$tmp/nothing" --codebook base-scd
grep -q "nothing/config.json" "$tmp/err" && ok "audit: names the missing config" || { bad "audit: missing dir message"; cat "$tmp/err"; }
expect 1 "audit: a missing --text file" -- "$scdb" audit --consumer "$py" --codebook base-scd --text "$tmp/none.txt"
expect 3 "audit: no broker" -- "$scdb" audit --consumer "$py" --codebook base-scd \
  --endpoint "ipc://$tmp/no-broker.sock" --timeout-ms 500
cat > "$tmp/fam.ini" <<INI
[broker]
endpoint = ipc://$tmp/fam.sock
data_dir = $tmp/fam-store
no_sync = 1
lookup_index = 0
[model base]
config = $data/models/base/config.json
[model python]
config = $data/models/python/config.json
[codebook base-scd]
kind = scd
model = base
file = $cb
[pair base-scd python]
decoder = scd
file = $data/pairs/base__python.safetensors
INI
"$scdb" serve --config "$tmp/fam.ini" >/dev/null 2>"$tmp/fam.err" &
fpid=$!
for _ in $(seq 1 600); do
  grep -q "serving ipc://" "$tmp/fam.err" && break
  kill -0 $fpid 2>/dev/null || break
  sleep 0.1
done
head -c 600 "$data/heldout/python.txt" > "$tmp/p1.txt"
tail -c 600 "$data/heldout/python.txt" > "$tmp/p2.txt"
aud() { "$scdb" audit --endpoint "ipc://$tmp/fam.sock" --codebook base-scd --text "$tmp/p1.txt" --text "$tmp/p2.txt" "$@"; }
expect 1 "audit: nothing stored yet" -- aud --consumer "$py"
grep -q "not stored" "$tmp/out" && grep -q "nothing measured" "$tmp/err" && ok "audit: says the prompts are not stored" \
  || { bad "audit: not-stored report"; cat "$tmp/out" "$tmp/err"; }
expect 0 "audit --store: the prompts stored, then measured" -- aud --consumer "$py" --store --producer "$data/models/base" --json
cp "$tmp/out" "$tmp/aud_good.json"
expect 0 "audit: measured again, from what is stored" -- aud --consumer "$py"
grep -q "^2 of 2 prompts measured, 128 predictions" "$tmp/out" && grep -q "| 384 | 64 |" "$tmp/out" \
  && ok "audit: table with both prompts" || { bad "audit: table"; cat "$tmp/out"; }
# the pair for python, audited with other weights (code's) under python's name
expect 0 "audit: other weights are refused, then measured" -- aud --consumer "$data/models/code" --model python --json
cp "$tmp/out" "$tmp/aud_stale.json"
if python3 - "$tmp/aud_good.json" "$tmp/aud_stale.json" "$("$scdb" fingerprint "$py" | cut -c1-32)" <<'PY'
import json, sys
good, stale, fp = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert good["weights_check"] == "accepted" and good["weights_fp"] == fp, good
assert good["summary"]["measured"] == 2 and good["summary"]["predictions"] == 128, good
assert [p["blocks_put"] for p in good["prompts"]] == [6, 6], good["prompts"]
assert good["summary"]["kl"] < 0.05 and good["summary"]["top1"] > 0.85, good["summary"]
assert stale["weights_check"] == "refused", stale
assert fp in stale["broker_message"] and stale["weights_fp"] in stale["broker_message"], stale
assert stale["summary"]["measured"] == 2 and stale["summary"]["kl"] > 2 * good["summary"]["kl"], stale["summary"]
PY
then ok "audit JSON: the pair's weights pass, other weights are refused and measure worse"
else bad "audit JSON"; cat "$tmp/aud_good.json" "$tmp/aud_stale.json"; fi
# issue 25 item 1: audit checks the producer's weights against the codebook's
expect 0 "audit --producer: the codebook's producer weights are accepted" -- aud --consumer "$py" \
  --producer "$data/models/base"
grep -q "^producer .* weights [0-9a-f]\{32\}: accepted$" "$tmp/out" && ok "audit --producer: says accepted" \
  || { bad "audit --producer accepted line"; cat "$tmp/out"; }
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  cp -r "$data/models/base" "$tmp/base-other"
  /usr/bin/python3 - "$tmp/base-other/model.safetensors" <<'PY'
import json, struct, sys
import numpy as np
with open(sys.argv[1], "r+b") as f:
    (n,) = struct.unpack("<Q", f.read(8)); t = json.loads(f.read(n))["layers.3.attention.wk.weight"]
    dt = {"F32": np.float32, "F16": np.float16}[t["dtype"]]; a, b = t["data_offsets"]
    f.seek(8 + n + a); x = np.frombuffer(f.read(b - a), dt) * dt(1.02); f.seek(8 + n + a); f.write(x.astype(dt).tobytes())
PY
  expect 1 "audit --producer: other producer weights are refused" -- aud --consumer "$py" \
    --producer "$tmp/base-other" --json
  ofp="$("$scdb" fingerprint "$tmp/base-other" | cut -c1-32)"
  bfp="$("$scdb" fingerprint "$data/models/base" | cut -c1-32)"
  python3 - "$tmp/out" "$ofp" "$bfp" <<'PY' && ok "audit --producer JSON: refused, both fingerprints named" \
    || { bad "audit --producer JSON"; cat "$tmp/out" "$tmp/err"; }
import json, sys
r, ofp, bfp = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
assert ofp != bfp and r["producer_weights_fp"] == ofp and r["producer_weights_check"] == "refused", r
assert ofp in r["producer_broker_message"] and bfp in r["producer_broker_message"], r
PY
  expect 1 "audit --store: nothing stored with other producer weights" -- aud --consumer "$py" \
    --producer "$tmp/base-other" --store
  grep -q "nothing stored" "$tmp/err" && ok "audit --store: says nothing was stored" \
    || { bad "audit --store refusal"; cat "$tmp/err"; }
fi
kill -TERM $fpid 2>/dev/null; wait $fpid

# the family report on a small sample: every model and domain present
"$scdb" models --max-bytes 4096 --json "$tmp/m.json" >"$tmp/out" 2>"$tmp/err"
code=$?
[ $code -le 1 ] && ok "models runs (exit $code)" || { bad "models runs (exit $code)"; cat "$tmp/err"; }
if python3 - "$tmp/m.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = {m["name"] for m in d["models"]}
assert {"base", "code", "manpages", "python"} <= names, names
assert set(d["domains"]) >= {"english", "code", "manpages", "python"}, d["domains"]
for m in d["models"]:
    assert set(m["bpb"]) >= {"english", "code", "manpages", "python"}, m
    assert all(0.5 < v < 8.0 for v in m["bpb"].values()), m
PY
then ok "models JSON has every model and domain"; else bad "models JSON has every model and domain"; fi

cli_expect_done
