#!/usr/bin/env bash
# Configure and build scdb into build/ (or $SCDB_BUILD_DIR).  Extra arguments
# go to cmake, e.g. scripts/build.sh -DSCDB_SANITIZE=ON
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${SCDB_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j2
