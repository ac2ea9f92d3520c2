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

# the family report on a small sample: every model and domain present
"$scdb" models --max-bytes 4096 --json "$tmp/m.json" >"$tmp/out" 2>"$tmp/err"
code=$?
[ $code -le 1 ] && ok "models runs (exit $code)" || { bad "models runs (exit $code)"; cat "$tmp/err"; }
if python3 - "$tmp/m.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
names = {m["name"] for m in d["models"]}
assert {"base", "code", "manpages"} <= names, names
for m in d["models"]:
    assert set(m["bpb"]) >= {"english", "code", "manpages"}, m
    assert all(0.5 < v < 8.0 for v in m["bpb"].values()), m
PY
then ok "models JSON has every model and domain"; else bad "models JSON has every model and domain"; fi

# the fan-out demo end to end: broker, producer, every specialist consumer
"$scdb" demo >"$tmp/demo" 2>"$tmp/err"
code=$?
if [ $code -eq 0 ] && grep -q "^demo: ok" "$tmp/demo" && grep -q "^| code |" "$tmp/demo" \
   && grep -q "^| manpages |" "$tmp/demo"; then ok "demo runs end to end for every specialist"
else bad "demo (exit $code)"; cat "$tmp/demo" "$tmp/err"; fi
ls /tmp | grep -q "^scdb-demo-" && bad "demo left its temp dir" || ok "demo cleaned up"
expect 2 "demo: bad --prefix" -- "$scdb" demo --prefix 100
expect 2 "demo: bad --budget" -- "$scdb" demo --budget 0
grep -Eq "^\| code \|.*\([1-9][0-9]* evictions" "$tmp/demo" && ok "demo consumers decode through a live session that evicts" \
  || bad "demo shows no live-session evictions"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
