# cli_expect.sh — sourced by the shell tests of the scdb command: a private
# temp dir ($tmp, removed on exit), pass / fail counters and expect().
#   ok WHAT / bad WHAT              count and print one check
#   expect CODE WHAT -- command...  run it (stdout $tmp/out, stderr $tmp/err)
#                                   and check its exit status
#   cli_expect_done                 print the totals; the status is the verdict
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
expect() {
  local want=$1 what=$2; shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"; local got=$?
  if [ "$got" -eq "$want" ]; then ok "$what"; else bad "$what (exit $got, want $want)"; cat "$tmp/err"; fi
}
cli_expect_done() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
