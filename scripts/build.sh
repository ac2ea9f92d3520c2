#!/usr/bin/env bash
# Configure and build scdb into build/ (or $SCDB_BUILD_DIR).  Extra arguments
# go to cmake, e.g. scripts/build.sh -DSCDB_SANITIZE=ON.  Warnings are
# errors here (SCDB_WERROR=ON; a plain cmake build leaves it off).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SCDB_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSCDB_WERROR=ON "$@" >/dev/null
cmake --build "$build" -j2
