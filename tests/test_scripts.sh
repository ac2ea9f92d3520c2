#!/usr/bin/env bash
# test_scripts.sh ROOT — the option parsing of the set-up scripts that take
# options: scripts/install-llama.sh (the one download the project makes)
# and scripts/gpu-check.sh.  Bad options are refused, exit 2, with a
# message naming them, before anything is fetched, built or run; --help
# answers.  Nothing here touches the network or a GPU.
set -u
root="$1"
tmp=$(mktemp -d /tmp/test_scripts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
# expect RC WHAT PATTERN -- CMD...: exit status RC and stderr (or stdout)
# matching PATTERN
expect() {
  local want="$1" what="$2" pat="$3"
  shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ $rc -eq "$want" ] && { [ -z "$pat" ] || grep -q -e "$pat" "$tmp/err" "$tmp/out"; }; then ok "$what"
  else bad "$what (exit $rc, want $want; pattern '$pat')"; cat "$tmp/out" "$tmp/err"; fi
}

il="$root/scripts/install-llama.sh"
dest="$tmp/never"
expect 2 "install-llama: an unknown option" "unknown option --frobnicate" -- "$il" --frobnicate
expect 2 "install-llama: --jobs 0" "--jobs '0': want a positive count" -- "$il" --source --jobs 0 --dest "$dest"
expect 2 "install-llama: --jobs x" "--jobs 'x': want a positive count" -- "$il" --source --jobs x --dest "$dest"
expect 2 "install-llama: --jobs -3" "--jobs '-3': want a positive count" -- "$il" --source --jobs -3 --dest "$dest"
expect 2 "install-llama: --dest without a value" "--dest needs a value" -- "$il" --dest
expect 2 "install-llama: --dest ''" "--dest needs a value" -- "$il" --dest ""
expect 2 "install-llama: --arch without --cuda" "add --cuda" -- "$il" --source --arch 90 --dest "$dest"
[ ! -e "$dest" ] && ok "install-llama: a refused call wrote nothing" || bad "install-llama: $dest exists"
expect 0 "install-llama --help" "--source \[--cuda\]" -- "$il" --help
expect 1 "install-llama --check: not installed there" "" -- "$il" --check --dest "$dest"
expect 1 "install-llama --check --cuda: not installed there" "" -- "$il" --check --cuda --dest "$dest"
# --check reads the tree's stamp: a source build is not the prebuilt, a CPU
# build not a CUDA one
nlc=$(sed -n 's/^NLC_VERSION=//p' "$il"); rel=$(sed -n 's/^LLAMA_RELEASE=//p' "$il")
mkdir -p "$tmp/src"
echo "node-llama-cpp $nlc llama.cpp $rel built from source" > "$tmp/src/VERSION"
expect 0 "install-llama --check --source: a source tree is installed" "" -- "$il" --check --source --dest "$tmp/src"
expect 1 "install-llama --check: a source tree is not the prebuilt" "" -- "$il" --check --dest "$tmp/src"
expect 1 "install-llama --check --cuda: a CPU source tree is not a CUDA one" "" -- "$il" --check --cuda --dest "$tmp/src"

gc="$root/scripts/gpu-check.sh"
expect 2 "gpu-check: an unknown option" "unknown option --frobnicate" -- "$gc" --frobnicate
expect 0 "gpu-check --help names the llama.cpp step" "--llama-only" -- "$gc" --help
expect 0 "gpu-check --help names install-llama --cuda" "install-llama.sh --cuda" -- "$gc" --help

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
