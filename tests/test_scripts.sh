#!/usr/bin/env bash
# test_scripts.sh ROOT — the option parsing of the set-up scripts that take
# options: scripts/install-llama.sh (the one download the project makes)
# and scripts/gpu-check.sh.  Bad options are refused, exit 2, with a
# message naming them, before anything is fetched, built or run; --help
# answers.  Nothing here touches the network or a GPU.
set -u
root="$1"
. "$(dirname "$0")/helpers/cli_expect.sh"
# expect_says CODE WHAT PATTERN -- CMD...: expect (cli_expect.sh), then
# its stdout or stderr matches PATTERN (none: "")
expect_says() {
  local pat="$3"
  expect "$1" "$2" "${@:4}"
  [ -z "$pat" ] && return
  grep -q -e "$pat" "$tmp/err" "$tmp/out" && ok "$2: says '$pat'" \
    || { bad "$2: does not say '$pat'"; cat "$tmp/out" "$tmp/err"; }
}

il="$root/scripts/install-llama.sh"
dest="$tmp/never"
expect_says 2 "install-llama: an unknown option" "unknown option --frobnicate" -- "$il" --frobnicate
expect_says 2 "install-llama: --jobs 0" "--jobs '0': want a positive count" -- "$il" --source --jobs 0 --dest "$dest"
expect_says 2 "install-llama: --jobs x" "--jobs 'x': want a positive count" -- "$il" --source --jobs x --dest "$dest"
expect_says 2 "install-llama: --jobs -3" "--jobs '-3': want a positive count" -- "$il" --source --jobs -3 --dest "$dest"
expect_says 2 "install-llama: --dest without a value" "--dest needs a value" -- "$il" --dest
expect_says 2 "install-llama: --dest ''" "--dest needs a value" -- "$il" --dest ""
expect_says 2 "install-llama: --arch without --cuda" "add --cuda" -- "$il" --source --arch 90 --dest "$dest"
[ ! -e "$dest" ] && ok "install-llama: a refused call wrote nothing" || bad "install-llama: $dest exists"
expect_says 0 "install-llama --help" "--source \[--cuda\]" -- "$il" --help
expect_says 1 "install-llama --check: not installed there" "" -- "$il" --check --dest "$dest"
expect_says 1 "install-llama --check --cuda: not installed there" "" -- "$il" --check --cuda --dest "$dest"
# --check reads the tree's stamp: a source build is not the prebuilt, a CPU
# build not a CUDA one
nlc=$(sed -n 's/^NLC_VERSION=//p' "$il"); rel=$(sed -n 's/^LLAMA_RELEASE=//p' "$il")
mkdir -p "$tmp/src"
echo "node-llama-cpp $nlc llama.cpp $rel built from source" > "$tmp/src/VERSION"
expect_says 0 "install-llama --check --source: a source tree is installed" "" -- "$il" --check --source --dest "$tmp/src"
expect_says 1 "install-llama --check: a source tree is not the prebuilt" "" -- "$il" --check --dest "$tmp/src"
expect_says 1 "install-llama --check --cuda: a CPU source tree is not a CUDA one" "" -- "$il" --check --cuda --dest "$tmp/src"

gc="$root/scripts/gpu-check.sh"
expect_says 2 "gpu-check: an unknown option" "unknown option --frobnicate" -- "$gc" --frobnicate
expect_says 0 "gpu-check --help names the llama.cpp step" "--llama-only" -- "$gc" --help
expect_says 0 "gpu-check --help names install-llama --cuda" "install-llama.sh --cuda" -- "$gc" --help

# --help prints the header comment, and nothing of the code after it (all
# four scripts with options; --help exits before any work)
for sc in "$il" "$gc" "$root/scripts/install-deps.sh" "$root/scripts/fuzz.sh"; do
  "$sc" --help > "$tmp/h" 2>&1
  [ -s "$tmp/h" ] && ! grep -qv '^#' "$tmp/h" && ok "$(basename "$sc") --help: the header comment only" \
    || { bad "$(basename "$sc") --help prints more than its header comment"; grep -v '^#' "$tmp/h"; }
done

cli_expect_done
