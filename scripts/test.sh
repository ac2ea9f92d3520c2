#!/usr/bin/env bash
# The test suite: install what is missing, build, run every test with CTest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "${SCDB_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 900 "$@"
