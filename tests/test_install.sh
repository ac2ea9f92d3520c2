#!/usr/bin/env bash
# test_install.sh BUILD SOURCE — `cmake --install BUILD --prefix P` gives a
# working scdb with no source tree (issue 20 item 4): P/bin/scdb finds its
# data in P/share/scdb (no path of SOURCE compiled in, $SCDB_DATA still
# overrides), runs the model report and the demo from there, and the
# installed broker serves with the installed configuration (a serve / stats
# / metrics round trip); the installed systemd unit passes
# `systemd-analyze verify` where systemd-analyze exists.
set -u
build="$1" src="$2"
tmp=$(mktemp -d /tmp/test_install.XXXXXX)
bpid=
cleanup() { [ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid"; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

P="$tmp/prefix"
cmake --install "$build" --prefix "$P" >"$tmp/install.log" 2>&1; code=$?
check "cmake --install --prefix exits 0" '[ $code -eq 0 ]' || cat "$tmp/install.log"
for f in bin/scdb bin/scdb-broker etc/scdb/scdb-broker.ini lib/systemd/system/scdb-broker.service \
         share/scdb/models/base/config.json share/scdb/codebooks/base.safetensors \
         share/scdb/pairs/base__code.safetensors share/scdb/policies/distillcache_base.safetensors \
         share/scdb/heldout/manpages.txt share/scdb/tools/plot_evict.py \
         share/scdb/tools/train_family.py share/scdb/python/bench_python.py \
         share/scdb/python/examples/torch_family.py \
         share/man/man1/scdb.1.gz share/man/man5/scdb-broker.ini.5.gz; do
  [ -e "$P/$f" ] || bad "installed: $f missing"
done
ok "installed: programs, data, unit, config, man pages"

"$P/bin/scdb" --help >"$tmp/help" 2>&1
check "installed scdb --help names P/share/scdb as its data" 'grep -q "default $P/share/scdb" "$tmp/help"'
check "installed scdb --help names no source path" '! grep -qF "$src" "$tmp/help"'
for b in scdb scdb-broker; do
  check "no source data path compiled into $b" \
    '! readelf -p .rodata "$P/bin/$b" 2>/dev/null | grep -qF "$src/data"'
done
check "the installed config names P/share/scdb" \
  'grep -q "^config = $P/share/scdb/models/base/config.json" "$P/etc/scdb/scdb-broker.ini" &&
   ! grep -qF "$src" "$P/etc/scdb/scdb-broker.ini"'

"$P/bin/scdb" models --max-bytes 4096 --json "$tmp/m.json" >"$tmp/models" 2>&1; code=$?
check "installed scdb models runs from P (exit $code)" \
  '[ $code -le 1 ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d[\"models\"]) >= 3" "$tmp/m.json"'
SCDB_DATA="$tmp/nothing" "$P/bin/scdb" models --max-bytes 4096 >/dev/null 2>"$tmp/err"; code=$?
check "\$SCDB_DATA still overrides (a missing folder: exit 1)" '[ $code -eq 1 ]'

mkdir -p "$tmp/demo-tmp"
TMPDIR="$tmp/demo-tmp" "$P/bin/scdb" demo --prefix 128 --gen 8 --device cpu >"$tmp/demo" 2>&1; code=$?
check "installed scdb demo runs end to end (exit $code)" \
  '[ $code -eq 0 ] && grep -q "^demo: ok" "$tmp/demo"' || cat "$tmp/demo"
check "the demo read its prefix from P/share/scdb" \
  'grep -q "^scdb demo: data $P/share/scdb," "$tmp/demo" && grep -q "bytes of heldout/" "$tmp/demo"'

# serve / stats / metrics round trip with the installed config (its
# endpoint and data_dir are the service's, /run/scdb and /var/lib/scdb:
# overridden here)
"$P/bin/scdb-broker" --config "$P/etc/scdb/scdb-broker.ini" --endpoint "ipc://$tmp/b.sock" \
  --data-dir "$tmp/store" --metrics-listen 127.0.0.1:0 --no-sync 1 >"$tmp/blog" 2>&1 &
bpid=$!
for _ in $(seq 1 600); do
  grep -q "serving ipc://" "$tmp/blog" && break
  kill -0 $bpid 2>/dev/null || break
  sleep 0.1
done
check "installed broker serves with the installed config" 'grep -q "serving ipc://" "$tmp/blog"' \
  || cat "$tmp/blog"
check "it loaded the SCD codebook and the learned policy from P/share/scdb" \
  'grep -q "codebook base-scd (scd, producer base)" "$tmp/blog" &&
   grep -q "policy distillcache: learned, from $P/share/scdb" "$tmp/blog"'
"$P/bin/scdb" stats --endpoint "ipc://$tmp/b.sock" --json >"$tmp/stats" 2>&1; code=$?
check "installed scdb stats answers" '[ $code -eq 0 ] && grep -q "\"broker_instance\"" "$tmp/stats"'
port=$(sed -n 's|.*metrics: http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/blog" | head -1)
if [ -n "$port" ] && command -v curl >/dev/null; then
  curl -s --max-time 30 "http://127.0.0.1:$port/metrics" >"$tmp/metrics"
  check "metrics: the installed config's 3 models are loaded" \
    'grep -q "^scdb_registry_entries{kind=\"models\"} 3$" "$tmp/metrics"'
else
  bad "no metrics port in the log, or no curl"
fi
kill -TERM $bpid; wait $bpid; code=$?; bpid=
check "installed broker stops cleanly" '[ $code -eq 0 ]'

if command -v systemd-analyze >/dev/null; then
  MANPATH="$P/share/man" systemd-analyze verify "$P/lib/systemd/system/scdb-broker.service" \
    >"$tmp/verify" 2>&1; code=$?
  check "systemd-analyze verify: the installed unit (and its man pages)" '[ $code -eq 0 ]' \
    || cat "$tmp/verify"
else
  echo "skip systemd-analyze verify: systemd-analyze not found"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
