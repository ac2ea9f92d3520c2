#!/usr/bin/env bash
# Install the Debian packages scdb needs (idempotent; fast when all present).
#   scripts/install-deps.sh            build + demo dependencies (Debian packages,
#                                      and the pinned llama.cpp from the npm
#                                      registry: scripts/install-llama.sh)
#   scripts/install-deps.sh --test     also what the test suite runs (pytest, PyTorch,
#                                      promtool and curl for the metrics test,
#                                      systemd-analyze for the unit, dpkg tools
#                                      for the package test, redis-server and
#                                      redis-cli for the Redis Cluster tests,
#                                      clang + libFuzzer for the fuzz smoke,
#                                      abigail-tools for libscdb's ABI check)
#   scripts/install-deps.sh --bench    also what the benchmarks use
#                                      (redis for `bench broker`, matplotlib for PNGs)
#   scripts/install-deps.sh --train    also PyTorch, to retrain the model family
#   scripts/install-deps.sh --suite    also the packages whose files make up the
#                                      eviction suite (tools/evict_suite.py; the
#                                      texts ship in data/evict_suite, so only
#                                      regenerating them needs these)
set -euo pipefail

pkgs=(build-essential cmake pkg-config
      libopenblas-dev libcmocka-dev liblmdb-dev libzmq3-dev
      libprotobuf-c-dev protobuf-c-compiler libcjson-dev libxxhash-dev libinih-dev
      libmicrohttpd-dev libsystemd-dev libhiredis-dev
      python3-dev python3-numpy)
for a in "$@"; do
  case "$a" in
    --test) pkgs+=(python3 python3-pytest python3-torch
                   prometheus curl systemd dpkg-dev fakeroot file
                   redis-server redis-tools
                   clang libclang-rt-14-dev abigail-tools) ;;
    --bench) pkgs+=(redis-server redis-tools python3-matplotlib) ;;
    --train) pkgs+=(python3-torch python3-numpy fortunes manpages manpages-dev doc-debian
                    libpython3.11-stdlib) ;;
    --suite) pkgs+=(git git-man vim-runtime iproute2 net-tools x11-utils xdg-user-dirs netbase
                    valgrind gdb bats linux-perf libxslt1-dev libffi-dev libjs-bootstrap4
                    nettle-dev libxmlsec1-dev zlib1g-dev libhiredis-dev liblzma-dev
                    libidn2-dev libtasn1-6-dev libexpat1-dev libpng-dev) ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;   # the header comment
    *) echo "install-deps.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

# llama.cpp: the pinned npm tarballs, checked by sha256 (scripts/install-llama.sh).
# SCDB_NO_LLAMA=1 skips it: scdb then builds without SCDB_LLAMA and the
# llama.cpp tests, bench and demo say they are off.
if [ "${SCDB_NO_LLAMA:-0}" != 1 ]; then
  "$(dirname "$0")/install-llama.sh" || {
    echo "install-deps: llama.cpp could not be installed (above); set SCDB_NO_LLAMA=1 to build without it" >&2
    exit 1
  }
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
