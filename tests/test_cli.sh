#!/usr/bin/env bash
# test_cli.sh SCDB — the scdb command's front door: help texts, usage errors,
# and the model family report end to end (small sample, JSON checked).
set -u
scdb="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
expect() {  # expect CODE DESCRIPTION -- command...
  local want=$1 what=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; local got=$?
  if [ "$got" -eq "$want" ]; then ok "$what"; else bad "$what (exit $got, want $want)"; cat "$tmp/err"; fi
}

expect 0 "scdb --help" -- "$scdb" --help
grep -q "models" "$tmp/out" && ok "help lists models" || bad "help lists models"
expect 2 "no command is a usage error" -- "$scdb"
expect 2 "unknown command is a usage error" -- "$scdb" frobnicate
grep -q "unknown command" "$tmp/err" && ok "unknown command says so" || bad "unknown command says so"
for sub in demo models bench calibrate train-policy serve put lookup get stats; do
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

# the fan-out demo end to end: broker, producer, every specialist consumer
mkdir -p "$tmp/demo-tmp"
TMPDIR="$tmp/demo-tmp" "$scdb" demo --device cpu >"$tmp/demo" 2>"$tmp/err"
code=$?
grep -q "scdb demo: device cpu (cpu requested" "$tmp/err" && ok "demo --device cpu says which device" \
  || bad "demo --device cpu says which device"
if [ $code -eq 0 ] && grep -q "^demo: ok" "$tmp/demo" && grep -q "^| code |" "$tmp/demo" \
   && grep -q "^| manpages |" "$tmp/demo"; then ok "demo runs end to end for every specialist"
else bad "demo (exit $code)"; cat "$tmp/demo" "$tmp/err"; fi
[ -z "$(ls -A "$tmp/demo-tmp")" ] && ok "demo cleaned up" || bad "demo left its temp dir"
expect 2 "demo: bad --prefix" -- "$scdb" demo --prefix 100
expect 2 "demo: bad --budget" -- "$scdb" demo --budget 0
grep -Eq "^\| code \|.*\([1-9][0-9]* evictions" "$tmp/demo" && ok "demo consumers decode through a live session that evicts" \
  || bad "demo shows no live-session evictions"
# issue 20 item 10: each consumer continues its own domain's text, and what it
# generates is text (agreement over a run of spaces says nothing)
if python3 - "$tmp/demo" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
src = [l for l in lines if l.startswith("prefix for ")]
assert any("heldout/code.txt" in l for l in src) and any("heldout/manpages.txt" in l for l in src), src
own = [l.split("`")[1] for l in lines if l.startswith("|   own prefill:")]
assert len(own) >= 2, own
for t in own:
    ink = sum(33 <= ord(c) < 127 for c in t)
    assert 4 * ink >= 3 * len(t) and "   " not in t, repr(t)
PY
then ok "demo: own-domain prefixes with continuations worth comparing"
else bad "demo: own-domain prefixes with continuations worth comparing"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
