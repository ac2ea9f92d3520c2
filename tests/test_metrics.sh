#!/usr/bin/env bash
# test_metrics.sh BROKER SCDB — the broker's Prometheus endpoint and `scdb
# stats` against a real broker and the real CLI clients:
#   * GET /metrics scraped while a workload runs: every scrape passes
#     `promtool check metrics` (Debian's prometheus package; the check is
#     skipped, saying so, where promtool is missing) and no counter goes down;
#   * after the workload, the counters say what it did: puts, gets, lookups
#     answered by the clients' own lookup index (reported in their goodbye)
#     vs by request, hot-tier hits, blocks written, histograms' counts (the
#     per-stage ones of every job too), a
#     refused hello by status;
#   * only GET /metrics is served; a bad metrics_listen is a usage error;
#   * `scdb stats`: the JSON has every field the table shows (one source),
#     capacity 0 reads "unbounded", --watch N --count K refreshes K times;
#   * two brokers sharing a one-node Redis Cluster (skipped, saying so,
#     without redis-server): the remote tier's counters `scdb stats` shows
#     are on /metrics too, the same values (the replace log's records, the
#     blocks refreshed after another broker's replace, errors), and
#     promtool passes with them (issue 42 item 8).
set -u
broker="$1" scdb="$2"
tmp=$(mktemp -d /tmp/test_metrics.XXXXXX)
bpid= xpids=
cleanup() {
  [ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid"
  for p in $xpids; do kill -TERM "$p" 2>/dev/null && wait "$p"; done
  # a failure: the broker's log says what it saw (it goes with $tmp)
  [ "$fail" -gt 0 ] && { echo "-- broker log:"; cat "$tmp/log"; }
  rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

ep="ipc://$tmp/b.sock"
"$broker" --endpoint "$ep" --data-dir "$tmp/store" --model m:2:1:8:512 --no-sync 1 \
  --metrics-listen 127.0.0.1:0 --log-level info >"$tmp/log" 2>&1 &
bpid=$!
# ready = its "serving" line (the bound only catches a broker that never gets there)
for _ in $(seq 1 600); do
  grep -q "serving ipc://" "$tmp/log" && break
  kill -0 $bpid 2>/dev/null || break
  sleep 0.1
done
port=$(sed -n 's|.*metrics: http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/log" | head -1)
[ -n "$port" ] && ok "broker logs its metrics address (port $port)" \
  || { bad "no metrics address in the log"; cat "$tmp/log"; exit 1; }
url="http://127.0.0.1:$port/metrics"
scrape() { curl -s --max-time 30 -o "$1" -w '%{http_code}' "$url"; }
# metric FILE 'name{labels}' -> its value (empty when absent)
metric() { awk -v k="$2" '$1 == k { print $2 }' "$1"; }

have_promtool=0
if command -v promtool >/dev/null; then have_promtool=1
else echo "skip promtool checks: promtool not found (scripts/install-deps.sh --test installs prometheus)"; fi
lint() {  # lint FILE WHAT
  [ $have_promtool -eq 1 ] || return 0
  if promtool check metrics <"$1" >"$tmp/lint" 2>&1; then ok "promtool check metrics: $2"
  else bad "promtool check metrics: $2"; cat "$tmp/lint"; fi
}

code=$(scrape "$tmp/m0")
check "GET /metrics answers 200 before any client" '[ "$code" = 200 ]'
lint "$tmp/m0" "idle broker"
check "idle: no puts yet" '[ "$(metric "$tmp/m0" "scdb_requests_total{kind=\"put\",status=\"SCDB_OK\"}")" = 0 ]'
check "idle: lmdb capacity unbounded (+Inf)" \
  '[ "$(metric "$tmp/m0" "scdb_tier_capacity_bytes{tier=\"lmdb\"}")" = "+Inf" ]'

# -------------------------------------------------------------- workload
# three prompts of 128 byte tokens (2 blocks of 64), raw f16 payloads of
# 2 layers x 64 tokens x 8 dims x (K, V) x 2 bytes = 4096 bytes per block
for p in a b c; do
  head -c 128 /dev/zero | tr '\0' "$p" >"$tmp/$p.txt"
done
head -c 8192 /dev/zero >"$tmp/pay.bin"
cli() { "$scdb" "$@" --endpoint "$ep" >>"$tmp/cli.out" 2>&1; }
for p in a b c; do cli put --model m --text "$tmp/$p.txt" --payload "$tmp/pay.bin"; done
cli put --model m --text "$tmp/a.txt" --payload "$tmp/pay.bin"      # both blocks exist
for _ in 1 2 3 4; do cli lookup --model m --text "$tmp/b.txt"; done   # the index answers
SCDB_LOOKUP_INDEX=0 "$scdb" lookup --model m --text "$tmp/c.txt" --endpoint "$ep" \
  >>"$tmp/cli.out" 2>&1                                             # a request answers
"$scdb" lookup --model nosuch --text "$tmp/a.txt" --endpoint "$ep" >/dev/null 2>&1  # refused

# during: a consumer getting prompt a over and over while /metrics is scraped
N_BG=12
( for _ in $(seq 1 $N_BG); do "$scdb" get --model m --text "$tmp/a.txt" --endpoint "$ep" \
    >/dev/null 2>>"$tmp/bg.err" || echo fail >>"$tmp/bg.err"; done ) &
gpid=$!
prev=0 mono=1 n_scr=0 all_200=1
while kill -0 $gpid 2>/dev/null && [ $n_scr -lt 50 ]; do
  n_scr=$((n_scr + 1))
  code=$(scrape "$tmp/during")
  [ "$code" = 200 ] || all_200=0
  cur=$(metric "$tmp/during" "scdb_requests_total{kind=\"get\",status=\"SCDB_OK\"}")
  [ "${cur:-0}" -ge "$prev" ] || mono=0
  prev=${cur:-0}
  [ $n_scr -eq 1 ] && lint "$tmp/during" "during the workload"
done
wait $gpid
check "scrapes during the workload answer 200 ($n_scr scrapes)" '[ $all_200 -eq 1 ]'
check "get counter never goes down across scrapes" '[ $mono -eq 1 ]'
check "background gets all succeeded" '[ ! -s "$tmp/bg.err" ]'

code=$(scrape "$tmp/m1")
lint "$tmp/m1" "after the workload"
req() { metric "$tmp/m1" "scdb_requests_total{kind=\"$1\",status=\"$2\"}"; }
check "4 puts answered ok" '[ "$(req put SCDB_OK)" = 4 ]'
check "6 new blocks, 2 already stored" \
  '[ "$(metric "$tmp/m1" "scdb_store_blocks_written_total{result=\"new\"}")" = 6 ] &&
   [ "$(metric "$tmp/m1" "scdb_store_blocks_written_total{result=\"existing\"}")" = 2 ]'
check "$N_BG gets answered ok" '[ "$(req get SCDB_OK)" = $N_BG ]'
# every scdb lookup / get process looked up through its mapped index once and
# reported it in its goodbye; the forced one was a request
want_index=$((4 + N_BG))
check "lookups answered by the clients' index: $want_index" \
  '[ "$(metric "$tmp/m1" "scdb_lookups_total{answered_by=\"index\"}")" = $want_index ]'
check "lookups answered by request: 1" \
  '[ "$(metric "$tmp/m1" "scdb_lookups_total{answered_by=\"request\"}")" = 1 ]'
check "the hello for an unknown model counted by its status" '[ "$(req hello SCDB_ENOTFOUND)" = 1 ]'
check "hot tier answered every block read (2 per get)" \
  '[ "$(metric "$tmp/m1" "scdb_tier_hits_total{tier=\"hot\"}")" = $((2 * N_BG)) ] &&
   [ "$(metric "$tmp/m1" "scdb_tier_misses_total{tier=\"lmdb\"}")" = 0 ]'
check "get latency and decode histograms counted every get" \
  '[ "$(metric "$tmp/m1" scdb_get_duration_seconds_count)" = $N_BG ] &&
   [ "$(metric "$tmp/m1" scdb_decode_duration_seconds_count)" = $N_BG ] &&
   [ "$(metric "$tmp/m1" "scdb_get_duration_seconds_bucket{le=\"+Inf\"}")" = $N_BG ]'
stage() { metric "$tmp/m1" "scdb_job_stage_seconds_count{op=\"$1\",stage=\"$2\"}"; }
check "every stage of every get counted once (dispatch, queue, service, handoff, total)" \
  '[ "$(stage get dispatch)" = $N_BG ] && [ "$(stage get queue)" = $N_BG ] &&
   [ "$(stage get service)" = $N_BG ] && [ "$(stage get handoff)" = $N_BG ] &&
   [ "$(stage get total)" = $N_BG ] &&
   [ "$(metric "$tmp/m1" "scdb_job_stage_seconds_bucket{op=\"get\",stage=\"queue\",le=\"+Inf\"}")" = $N_BG ]'
check "the puts' stages counted (4 puts, on the writer)" \
  '[ "$(stage put queue)" = 4 ] && [ "$(stage put service)" = 4 ]'
check "a get's stages sum to at most its total (queue + service <= total)" \
  'awk -v q="$(metric "$tmp/m1" "scdb_job_stage_seconds_sum{op=\"get\",stage=\"queue\"}")" \
       -v s="$(metric "$tmp/m1" "scdb_job_stage_seconds_sum{op=\"get\",stage=\"service\"}")" \
       -v t="$(metric "$tmp/m1" "scdb_job_stage_seconds_sum{op=\"get\",stage=\"total\"}")" \
       "BEGIN { exit !(s > 0 && q + s <= t) }"'
check "no eviction ran: its stages are all 0" '[ "$(stage session_evict service)" = 0 ]'
check "6 blocks stored in lmdb and hot" \
  '[ "$(metric "$tmp/m1" "scdb_tier_blocks{tier=\"lmdb\"}")" = 6 ] &&
   [ "$(metric "$tmp/m1" "scdb_tier_blocks{tier=\"hot\"}")" = 6 ]'
check "no client, arena or session left live" \
  '[ "$(metric "$tmp/m1" scdb_clients)" = 0 ] && [ "$(metric "$tmp/m1" scdb_arenas)" = 0 ] &&
   [ "$(metric "$tmp/m1" scdb_sessions)" = 0 ]'
check "queues empty" '[ "$(metric "$tmp/m1" "scdb_queue_depth{queue=\"workers\"}")" = 0 ]'
check "a fresh snapshot (age under 1 s)" \
  'awk "BEGIN { exit !($(metric "$tmp/m1" scdb_metrics_snapshot_age_seconds) < 1) }"'

code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/")
check "other paths: 404" '[ "$code" = 404 ]'
code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' -X POST "$url")
check "other methods: 405" '[ "$code" = 405 ]'

# ------------------------------------------------------------ scdb stats
"$scdb" stats --endpoint "$ep" >"$tmp/table" 2>"$tmp/err"; c1=$?
"$scdb" stats --endpoint "$ep" --json >"$tmp/json" 2>>"$tmp/err"; c2=$?
check "scdb stats and --json exit 0" '[ $c1 -eq 0 ] && [ $c2 -eq 0 ]'
check "table: disk capacity 0 reads unbounded" 'grep -q "^| disk capacity | unbounded |" "$tmp/table"'
if python3 - "$tmp/table" "$tmp/json" <<'PY'
import json, sys
table = open(sys.argv[1]).read().split("\n\n")
# every section of fields (store, broker, remote tier), not the requests'
rows = [l for part in table[:-1] for l in part.splitlines()[2:] if l.startswith("| ")]
d = json.load(open(sys.argv[2]))
keys = [k for k in d if k != "ops"]
# issue 20 item 8: what the table showed and the JSON lacked
need = {"put_existing", "disk_capacity_bytes", "hot_capacity_bytes", "get_misses",
        "lookup_miss_blocks", "pinned_blocks", "inflight", "reclaimed_arenas",
        "broker_instance", "stale_tokens"}
missing = need - set(keys)
assert not missing, missing
assert len(rows) == len(keys), (len(rows), len(keys))
assert d["puts"] == 6 and d["put_existing"] == 2, d
assert d["ops"]["get"]["count"] == 12, d["ops"]
PY
then ok "stats JSON has every table field (and the same count)"; else bad "stats JSON vs table"; fi
"$scdb" stats --endpoint "$ep" --json --watch 0.2 --count 3 >"$tmp/watch" 2>>"$tmp/err"; c3=$?
check "stats --watch 0.2 --count 3: three JSON lines" \
  '[ $c3 -eq 0 ] && [ "$(wc -l <"$tmp/watch")" -eq 3 ] &&
   python3 -c "import json,sys; [json.loads(l) for l in open(sys.argv[1])]" "$tmp/watch"'
"$scdb" stats --endpoint "$ep" --watch 0 >/dev/null 2>&1; c4=$?
"$scdb" stats --endpoint "$ep" --count 2 >/dev/null 2>&1; c5=$?
check "stats: bad --watch / --count alone are usage errors" '[ $c4 -eq 2 ] && [ $c5 -eq 2 ]'

# --------------------------------------------------------- bad settings
"$broker" --endpoint "ipc://$tmp/b2.sock" --data-dir "$tmp/store2" --model m:2:1:8:512 \
  --metrics-listen 127.0.0.1:notaport >/dev/null 2>"$tmp/err2"; c6=$?
check "metrics_listen with a bad port: exit 2, says why" \
  '[ $c6 -eq 2 ] && grep -q "metrics_listen" "$tmp/err2"'
"$broker" --endpoint "ipc://$tmp/b3.sock" --data-dir "$tmp/store3" --model m:2:1:8:512 \
  --metrics-listen "127.0.0.1:$port" >/dev/null 2>"$tmp/err3"; c7=$?
check "metrics_listen on a port in use: exit 1, says why" \
  '[ $c7 -eq 1 ] && grep -q "cannot listen" "$tmp/err3"'

kill -TERM $bpid; wait $bpid; code=$?; bpid=
check "broker with metrics stops cleanly on SIGTERM" '[ $code -eq 0 ]'

# ------------------------------------------------------------ remote tier
# A and B share a one-node Redis Cluster; A stores prompt a, B gets it (from
# the cluster, then keeps it), A replaces it: B refreshes its copies after
# reading A's records on the replace log.  Each broker's /metrics must carry
# what its `scdb stats --json` says of the tier.
remote_tier_checks() {
  local port rpid i pa pb ea eb ua ub
  # a free port whose cluster bus port (+10000) exists
  port=$(python3 -c 'import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p < 55000: print(p); break')
  mkdir -p "$tmp/redis"
  redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file "$tmp/redis/nodes.conf" --dir "$tmp/redis" --save "" \
    --appendonly no >"$tmp/redis/log" 2>&1 &
  rpid=$!; xpids="$xpids $rpid"
  for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$port" cluster addslotsrange 0 16383 >/dev/null
  for _ in $(seq 1 100); do
    redis-cli -p "$port" cluster info 2>/dev/null | grep -q "cluster_state:ok" && break; sleep 0.1
  done
  check "a one-node Redis Cluster on port $port" \
    'redis-cli -p "$port" cluster info | grep -q "cluster_state:ok"'
  for n in ra rb; do
    "$broker" --endpoint "ipc://$tmp/$n.sock" --data-dir "$tmp/$n.store" --model m:2:1:8:512 \
      --no-sync 1 --metrics-listen 127.0.0.1:0 --log-level info \
      --remote-cluster "127.0.0.1:$port" --remote-ttl 3600 --remote-timeout-ms 2000 \
      >"$tmp/$n.log" 2>&1 &
    eval "${n}_pid=\$!"; xpids="$xpids $!"
  done
  for n in ra rb; do
    for _ in $(seq 1 600); do grep -q "serving ipc://" "$tmp/$n.log" && break; sleep 0.1; done
  done
  pa=$(sed -n 's|.*metrics: http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/ra.log" | head -1)
  pb=$(sed -n 's|.*metrics: http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/rb.log" | head -1)
  ea="ipc://$tmp/ra.sock" eb="ipc://$tmp/rb.sock"
  ua="http://127.0.0.1:$pa/metrics" ub="http://127.0.0.1:$pb/metrics"
  check "two brokers with a remote tier serve metrics" '[ -n "$pa" ] && [ -n "$pb" ]'
  # stats FIELD ENDPOINT -> its value in `scdb stats --json`
  stats() { "$scdb" stats --endpoint "$2" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
  # wait_stat FIELD ENDPOINT VALUE: until the broker says so (10 s)
  wait_stat() {
    for _ in $(seq 1 100); do [ "$(stats "$1" "$2")" = "$3" ] && return 0; sleep 0.1; done
    return 1
  }
  head -c 8192 /dev/zero | tr '\0' '\1' >"$tmp/pay2.bin"
  "$scdb" put --model m --text "$tmp/a.txt" --payload "$tmp/pay.bin" --endpoint "$ea" >/dev/null
  check "A's two blocks written to the cluster" 'wait_stat remote_writes "$ea" 2'
  "$scdb" get --model m --text "$tmp/a.txt" --endpoint "$eb" >/dev/null
  check "B fetched them and keeps them" 'wait_stat remote_inserted "$eb" 2'
  "$scdb" put --model m --text "$tmp/a.txt" --payload "$tmp/pay2.bin" --replace --endpoint "$ea" \
    >/dev/null
  check "A announced its two replaced blocks" 'wait_stat remote_replace_records "$ea" 2'
  check "B refreshed its two copies" 'wait_stat remote_refreshed "$eb" 2'
  # each broker's stats, its scrape, its stats again: a value the tier
  # changes by itself meanwhile (an error on a loaded machine, the state
  # that follows it) lies between the two
  for side in a b; do
    if [ $side = a ]; then e="$ea" u="$ua"; else e="$eb" u="$ub"; fi
    "$scdb" stats --endpoint "$e" --json >"$tmp/s1$side"
    curl -s --max-time 30 -o "$tmp/m$side" "$u"
    "$scdb" stats --endpoint "$e" --json >"$tmp/s2$side"
  done
  lint "$tmp/ma" "a broker with a remote tier (A)"
  lint "$tmp/mb" "a broker with a remote tier (B)"
  # js FILE FIELD -> its value
  js() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
  # the metric that carries each `scdb stats` field of the tier
  while read -r field name; do
    for side in a b; do
      lo=$(js "$tmp/s1$side" "$field") hi=$(js "$tmp/s2$side" "$field")
      got=$(metric "$tmp/m$side" "$name")
      [ "$lo" -le "$hi" ] || { t=$lo; lo=$hi; hi=$t; }
      check "$side: $name = stats $field ($got in [$lo, $hi])" \
        '[ -n "$got" ] && [ "$got" -ge "$lo" ] && [ "$got" -le "$hi" ]'
    done
  done <<'MAP'
remote_up scdb_remote_up
remote_hits scdb_remote_blocks_total{result="hit"}
remote_misses scdb_remote_blocks_total{result="miss"}
remote_invalid scdb_remote_blocks_total{result="refused"}
remote_bytes_read scdb_remote_bytes_total{direction="read"}
remote_bytes_written scdb_remote_bytes_total{direction="written"}
remote_writes scdb_remote_writes_total
remote_write_errors scdb_remote_write_failures_total{cause="error"}
remote_queue_drops scdb_remote_write_failures_total{cause="queue_full"}
remote_errors scdb_remote_errors_total
remote_pending scdb_remote_pending_writes
remote_inserted scdb_remote_kept_blocks_total
remote_probes scdb_remote_probes_total
remote_probe_hit_blocks scdb_remote_probe_blocks_total{result="hit"}
remote_fetches scdb_remote_fetches_total
remote_state_changes scdb_remote_state_changes_total
remote_replace_records scdb_remote_replace_log_records_total{direction="appended"}
remote_refreshed scdb_remote_refreshed_blocks_total
remote_replace_log_resets scdb_remote_replace_log_resets_total
MAP
  check "B read A's two records; A read none of its own" \
    '[ "$(metric "$tmp/mb" "scdb_remote_replace_log_records_total{direction=\"read\"}")" = 2 ] &&
     [ "$(metric "$tmp/ma" "scdb_remote_replace_log_records_total{direction=\"read\"}")" = 0 ]'
  for n in ra rb; do
    eval "p=\$${n}_pid"
    kill -TERM "$p"; wait "$p"; code=$?
    check "broker $n with a remote tier stops cleanly" '[ $code -eq 0 ]'
  done
  kill -TERM "$rpid"; wait "$rpid" 2>/dev/null
  xpids=
}
if command -v redis-server >/dev/null && command -v redis-cli >/dev/null; then
  remote_tier_checks
else
  echo "skip remote tier checks: redis-server or redis-cli not found (Debian: redis-server, redis-tools)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
