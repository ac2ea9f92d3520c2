#!/usr/bin/env bash
# The main job: install what is missing, build, and run it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
# the fan-out in llama.cpp (scdb demo --engine reference: scdb's own engine)
exec "$root/build/cli/scdb" demo --engine llama.cpp "$@"
