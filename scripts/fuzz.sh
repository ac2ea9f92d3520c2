#!/usr/bin/env bash
# Fuzz every parser with libFuzzer + ASan + UBSan (tests/fuzz/README.md).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     each target for SECONDS (default 60)
#   scripts/fuzz.sh --runs N [TARGET...]      each target for N executions
#
# Targets: wire safetensors gguf block_value config lookup_index policy
# codebook pair (default: all).  Builds them with clang into build-fuzz/ (or
# $SCDB_FUZZ_BUILD_DIR; -DSCDB_FUZZ=ON, CUDA off), starts each from its
# committed corpus tests/fuzz/corpus/TARGET and keeps what it finds in
# build-fuzz/corpus/TARGET (the committed corpus is never written).  A crash
# is saved as build-fuzz/artifacts/TARGET/RUN/crash-*: copy it into
# tests/fuzz/corpus/TARGET/ as crash-<what> with the fix, so every build
# replays it (CTest test_fuzz_TARGET).  Prints one line per target and a
# table (also in build-fuzz/fuzz-summary.md); exit 1 if any target crashed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SCDB_FUZZ_BUILD_DIR:-$root/build-fuzz}"
all=(wire safetensors gguf block_value config lookup_index policy codebook pair)
seconds=60
runs=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;   # the header comment
    [0-9]*) seconds="$1"; shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

cc="${CC:-clang}"
command -v "$cc" >/dev/null || { echo "fuzz.sh: $cc not found (scripts/install-deps.sh --test installs clang)" >&2; exit 2; }
echo "== building the fuzz targets with $cc into $build"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSCDB_FUZZ=ON -DSCDB_CUDA=OFF -DSCDB_WERROR=ON >/dev/null || exit 2
cmake --build "$build" -j2 --target scdb_fuzz >"$build/fuzz-build.log" 2>&1 || {
  tail -30 "$build/fuzz-build.log"; exit 2; }

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
summary="$build/fuzz-summary.md"
{
  echo "| target | time s | executions | exec/s | corpus | crashes |"
  echo "|---|---|---|---|---|---|"
} > "$summary"
failed=0
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz.sh: no target $t" >&2; failed=1; continue; }
  work="$build/corpus/$t"
  art="$build/artifacts/$t/$(date +%Y%m%d-%H%M%S)"   # this run's findings only
  mkdir -p "$work" "$art"
  limit=(-max_total_time="$seconds")
  [ -n "$runs" ] && limit=(-runs="$runs")
  log="$build/fuzz-$t.log"
  t0=$(date +%s)
  "$bin" "${limit[@]}" -timeout=30 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$art/" "$work" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(ls "$art" 2>/dev/null | grep -c -E '^(crash|leak|timeout|oom)-' || true)
  corpus=$(ls "$work" | wc -l)
  execs=${execs:-0}
  rate=$(( dt > 0 ? execs / dt : execs ))
  status="ok"
  if [ $rc -ne 0 ] || [ "$crashes" -gt 0 ]; then
    status="FAILED (exit $rc; see $log and $art)"
    failed=1
    grep -m3 -E 'ERROR|invariant broken|SUMMARY' "$log" | sed 's/^/    /'
  fi
  echo "fuzz_$t: $execs executions in $dt s ($rate/s), corpus $corpus, $crashes crash file(s): $status"
  echo "| $t | $dt | $execs | $rate | $corpus | $crashes |" >> "$summary"
done
echo
cat "$summary"
exit $failed
