#!/usr/bin/env bash
# test_disk_full.sh BROKER SCDB — a broker whose store fills its filesystem
# (issue 25 item 7), for real: the data directory is a 4 MiB tmpfs (mounting
# needs root: skipped, saying so, otherwise).
#   * a put that does not fit is refused with SCDB_ENOSPC and a message that
#     names the data directory and its free space (not SCDB_EIO);
#   * the broker logs one line when the disk becomes full and one when it has
#     space again (not one per put), and no "lmdb commit" error lines;
#   * /metrics: scdb_store_disk_full is 1 while full, 0 after; the refused
#     blocks are counted;
#   * the broker keeps serving what it has, refused blocks are not visible,
#     puts work again once space is freed, everything acknowledged reads back
#     after a restart.
set -u
broker="$1" scdb="$2"
tmp=$(mktemp -d /tmp/test_disk_full.XXXXXX)
bpid= mounted=0 fail=0 pass=0
cleanup() {
  [ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid"
  [ "$fail" -gt 0 ] && { echo "-- broker log:"; cat "$tmp/log"; }
  [ $mounted -eq 1 ] && umount -l "$tmp/fs"
  rm -rf "$tmp"
}
trap cleanup EXIT
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

mkdir "$tmp/fs"
if ! mount -t tmpfs -o size=4m tmpfs "$tmp/fs" 2>"$tmp/mount.err"; then
  echo "skip: cannot mount a tmpfs ($(cat "$tmp/mount.err")): the disk-full test needs root"
  exit 0
fi
mounted=1
# most of the filesystem taken by something else, freed later
head -c $((1536 * 1024)) /dev/zero >"$tmp/fs/filler"

ep="ipc://$tmp/b.sock"
start() {
  "$broker" --endpoint "$ep" --data-dir "$tmp/fs/store" --model m:4:8:64:4096 \
    --metrics-listen 127.0.0.1:0 --log-level info >>"$tmp/log" 2>&1 &
  bpid=$!
  for _ in $(seq 1 600); do
    [ "$(grep -c "serving ipc://" "$tmp/log")" -ge "$1" ] && break
    kill -0 $bpid 2>/dev/null || break
    sleep 0.1
  done
  port=$(sed -n 's|.*metrics: http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' "$tmp/log" | tail -1)
}
start 1
[ -n "$port" ] || { bad "broker did not start"; exit 1; }
metric() { curl -s --max-time 30 "http://127.0.0.1:$port/metrics" |
           awk -v k="$1" '$1 == k { print $2 }'; }

# one block per prompt: 64 byte tokens, raw f16 payload of 4 layers x 64
# tokens x 512 dims x (K, V) x 2 bytes = 512 KiB
head -c $((512 * 1024)) /dev/zero | tr '\0' '\074' >"$tmp/pay.bin"   # F16 0x3c3c: finite
prompt() { head -c 64 /dev/zero | tr '\0' "$1" >"$tmp/$1.txt"; }
put() { "$scdb" put --model m --text "$tmp/$1.txt" --payload "$tmp/pay.bin" --endpoint "$ep" \
          >"$tmp/out" 2>"$tmp/err"; }
stored=""
full_at=
for p in a b c d e f g h; do
  prompt $p
  if put $p; then stored="$stored $p"; else full_at=$p; break; fi
done
check "the disk filled up after some puts (stored:$stored)" '[ -n "$full_at" ] && [ -n "$stored" ]'
check "the refusal is SCDB_ENOSPC, naming the data directory and its free space" \
  'grep -q "SCDB_ENOSPC" "$tmp/err" && grep -q "is full" "$tmp/err" &&
   grep -q "$tmp/fs/store" "$tmp/err" && grep -q "bytes free" "$tmp/err"'
cat "$tmp/err"
for _ in 1 2 3; do put $full_at; done
check "later puts are refused the same way" 'grep -q "SCDB_ENOSPC" "$tmp/err"'
check "one log line for the disk becoming full, none per put" \
  '[ "$(grep -c "disk full" "$tmp/log")" = 1 ] && ! grep -q "lmdb commit\|lmdb put" "$tmp/log"'
check "/metrics: scdb_store_disk_full 1, 4 refused blocks" \
  '[ "$(metric scdb_store_disk_full)" = 1 ] &&
   [ "$(metric scdb_store_disk_full_refused_blocks_total)" = 4 ]'
first=${stored# }; first=${first%% *}
"$scdb" lookup --model m --text "$tmp/$first.txt" --endpoint "$ep" --json >"$tmp/out" 2>&1
check "the broker still serves what it stored" 'grep -q "\"matched_tokens\": *64" "$tmp/out"'
"$scdb" lookup --model m --text "$tmp/$full_at.txt" --endpoint "$ep" --json >"$tmp/out" 2>&1
check "the refused block is not visible" 'grep -q "\"matched_tokens\": *0" "$tmp/out"'

rm "$tmp/fs/filler"
put $full_at && stored="$stored $full_at"
check "after space is freed the put is stored" '[ "${stored##* }" = "$full_at" ]'
check "one log line for the space coming back" '[ "$(grep -c "space again" "$tmp/log")" = 1 ]'
check "/metrics: scdb_store_disk_full 0" '[ "$(metric scdb_store_disk_full)" = 0 ]'

kill -TERM $bpid && wait $bpid
bpid=
start 2
all=1
for p in $stored; do
  "$scdb" lookup --model m --text "$tmp/$p.txt" --endpoint "$ep" --json >"$tmp/out" 2>&1
  grep -q "\"matched_tokens\": *64" "$tmp/out" || { all=0; cat "$tmp/out"; }
done
check "every acknowledged prompt is there after a restart ($stored)" '[ $all -eq 1 ]'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
