#!/usr/bin/env bash
# The test suite: install what is missing, build, run every test.
#
#   scripts/test.sh [CTEST ARGS...]
#
#   1. the whole suite with CTest, two tests at a time (ctest -j2): no test
#      may depend on timing or on a port or path another test uses
#   2. the numeric tests (test_kernels, test_model, test_codec, test_evict)
#      once more under each OpenBLAS kernel this CPU can run among
#      Sandybridge, Haswell, Zen and SkylakeX (OPENBLAS_CORETYPE): BLAS gives
#      different last bits per kernel, and the tests must hold on all of them
#   3. an ASan + UBSan build of everything (build-asan/, CUDA off) and the
#      whole suite again in it
#   4. the fuzz smoke: every libFuzzer target (tests/fuzz) for
#      $SCDB_FUZZ_SMOKE_S seconds (default 15; 8 targets: 2 minutes), built
#      with clang into build-fuzz/ (scripts/fuzz.sh)
#   5. the other builds, compiled (not run again), warnings as errors: a
#      Release build with the default compiler (build-release/, -O3, whose
#      warnings RelWithDebInfo's -O2 does not show) and a clang build
#      (build-clang/, CUDA off: nvcc's host compiler would not be clang)
#
# Extra arguments go to step 1's ctest.  SCDB_BUILD_DIR moves build/ (and
# the others beside it); SCDB_TEST_NO_SANITIZE=1 skips step 3,
# SCDB_TEST_NO_FUZZ=1 step 4, SCDB_TEST_NO_BUILDS=1 step 5 (for a quick
# local run; CI runs all).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SCDB_BUILD_DIR:-$root/build}"
"$root/scripts/install-deps.sh" --test
"$root/scripts/build.sh"
t0=$(date +%s)

echo "== 1. the whole suite, ctest -j2"
ctest --test-dir "$build" -j2 --output-on-failure --timeout 900 "$@"

echo "== 2. numeric tests under each OpenBLAS kernel this CPU supports"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
cores=()
has avx && cores+=(Sandybridge)
has avx2 fma && cores+=(Haswell Zen)
has avx512f avx512bw avx512vl avx512dq avx512cd && cores+=(SkylakeX)
echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "OpenBLAS kernels run: ${cores[*]:-none (no AVX: only the default kernel, step 1)}"
for c in "${cores[@]}"; do
  echo "-- OPENBLAS_CORETYPE=$c"
  OPENBLAS_CORETYPE=$c ctest --test-dir "$build" -j2 --output-on-failure --timeout 300 \
    -R '^test_(kernels|model|codec|evict)$'
done

if [ "${SCDB_TEST_NO_SANITIZE:-0}" = 1 ]; then
  echo "== 3. sanitizer build skipped (SCDB_TEST_NO_SANITIZE=1)"
else
  echo "== 3. ASan + UBSan build and the whole suite in it"
  asan="${build}-asan"
  SCDB_BUILD_DIR="$asan" "$root/scripts/build.sh" -DSCDB_SANITIZE=ON -DSCDB_CUDA=OFF
  # reports go to files too: a broker that a shell test starts has its
  # stderr in a temp dir the test removes, so they are printed here
  reports="$asan/sanitizer-reports"
  rm -rf "$reports" && mkdir -p "$reports"
  rc=0
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:log_path="$reports/asan" \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path="$reports/ubsan" \
    ctest --test-dir "$asan" -j2 --output-on-failure --timeout 900 || rc=$?
  if compgen -G "$reports/*" >/dev/null; then
    echo "-- sanitizer output ($reports):"
    for f in "$reports"/*; do echo "---- $f"; cat "$f"; done
    # a finding fails the step; a note alone (LSan's "thread was not
    # suspended") does not
    if grep -qlE "ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: " "$reports"/*; then
      echo "-- a sanitizer reported an error (above)"
      [ "$rc" -ne 0 ] || rc=1
    fi
  fi
  [ "$rc" -eq 0 ] || { echo "== 3. failed"; exit "$rc"; }
fi
if [ "${SCDB_TEST_NO_FUZZ:-0}" = 1 ]; then
  echo "== 4. fuzz smoke skipped (SCDB_TEST_NO_FUZZ=1)"
else
  echo "== 4. fuzz smoke: every target for ${SCDB_FUZZ_SMOKE_S:-15} s"
  "$root/scripts/fuzz.sh" "${SCDB_FUZZ_SMOKE_S:-15}"
fi
if [ "${SCDB_TEST_NO_BUILDS:-0}" = 1 ]; then
  echo "== 5. other builds skipped (SCDB_TEST_NO_BUILDS=1)"
else
  echo "== 5. other builds, compile only, warnings as errors"
  echo "-- Release, $(cc --version | head -1), into ${build}-release"
  SCDB_BUILD_DIR="${build}-release" "$root/scripts/build.sh" -DCMAKE_BUILD_TYPE=Release
  echo "-- RelWithDebInfo, $(clang --version | head -1), CUDA off, into ${build}-clang"
  SCDB_BUILD_DIR="${build}-clang" "$root/scripts/build.sh" -DCMAKE_C_COMPILER=clang -DSCDB_CUDA=OFF
  echo "-- both built"
fi
echo "== all steps passed in $(( $(date +%s) - t0 )) s after the build"
