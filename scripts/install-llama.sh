#!/usr/bin/env bash
# Fetch the pinned llama.cpp (the one dependency not from Debian) into
# .deps/llama.cpp/ of the checkout, or $SCDB_DEPS_DIR/llama.cpp.  Idempotent:
# nothing is fetched when the unpacked tree is there and its stamp names the
# pinned version.
#
#   scripts/install-llama.sh           fetch (npm pack, no install scripts run),
#                                      check sha256, unpack
#   scripts/install-llama.sh --check   exit 0 when installed, 1 when not
#
# What it lays down (nothing of it is committed; .deps/ is git-ignored):
#   lib/       the prebuilt libraries of @node-llama-cpp/linux-x64: libllama,
#              libggml, libggml-base and the CPU backends libggml-cpu-*.so
#              (loaded at run time by ggml_backend_load_all_from_path)
#   include/   llama.h and ggml's public headers, from the source bundle of
#              the same release (node-llama-cpp's llama/gitRelease.bundle)
#   models/    the bundle's vocab-only GGUF files (ggml-vocab-*.gguf)
#   licenses/  llama.cpp's and node-llama-cpp's licences (MIT)
#   VERSION    the pins below
# The pins: node-llama-cpp 3.21.1 bundles llama.cpp release v0.4.0
# (node-llama-cpp's llama/binariesGithubRelease.json).  docs/DESIGN.md "llama.cpp".
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="${SCDB_DEPS_DIR:-$root/.deps}"
dst="$deps/llama.cpp"
NLC_VERSION=3.21.1
LLAMA_RELEASE=v0.4.0
SRC_TGZ=node-llama-cpp-$NLC_VERSION.tgz
SRC_SHA=7a231d6bafa14142a1cbed9893d4ec5bc6041b2a5f5939a623accaab4203c11f
BIN_TGZ=node-llama-cpp-linux-x64-$NLC_VERSION.tgz
BIN_SHA=4b5b65a8b2611d8af94349b02d815c0f424a30a0a19aef2be5db25ecfef6730f
stamp="node-llama-cpp $NLC_VERSION llama.cpp $LLAMA_RELEASE"

installed() { [ -f "$dst/VERSION" ] && [ "$(cat "$dst/VERSION")" = "$stamp" ]; }
case "${1:-}" in
  --check) installed; exit $? ;;
  -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
  "") ;;
  *) echo "install-llama.sh: unknown option $1" >&2; exit 2 ;;
esac
installed && exit 0

if [ "$(uname -m)" != x86_64 ] || [ "$(uname -s)" != Linux ]; then
  echo "install-llama.sh: the pinned prebuilt llama.cpp is for Linux x86_64; this is $(uname -sm)." >&2
  echo "  scdb builds without it (SCDB_LLAMA off); the llama.cpp tests then skip." >&2
  exit 1
fi
need=()
command -v npm >/dev/null || need+=(npm)
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
  echo "install-llama: installing ${need[*]} (Debian)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$deps/npm"
fetch() {  # name@version file sha256
  local f="$deps/npm/$2"
  if [ ! -f "$f" ] || ! echo "$3  $f" | sha256sum -c --status; then
    echo "install-llama: npm pack $1" >&2
    rm -f "$f"
    (cd "$deps/npm" && npm pack --silent --ignore-scripts "$1" >/dev/null)
  fi
  if ! echo "$3  $f" | sha256sum -c --status; then
    echo "install-llama.sh: $2 does not have the pinned sha256 $3;" >&2
    echo "  got $(sha256sum "$f" | cut -d' ' -f1).  Not unpacking it." >&2
    exit 1
  fi
}
fetch "node-llama-cpp@$NLC_VERSION" "$SRC_TGZ" "$SRC_SHA"
fetch "@node-llama-cpp/linux-x64@$NLC_VERSION" "$BIN_TGZ" "$BIN_SHA"

tmp="$(mktemp -d "$deps/.unpack.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/out/lib" "$tmp/out/include" "$tmp/out/models" "$tmp/out/licenses"
tar -xzf "$deps/npm/$BIN_TGZ" -C "$tmp" package/bins/linux-x64 package/LICENSE 2>/dev/null ||
  tar -xzf "$deps/npm/$BIN_TGZ" -C "$tmp" package/bins/linux-x64
cp "$tmp"/package/bins/linux-x64/lib*.so "$tmp/out/lib/"
rm -f "$tmp/out/lib/libllama-common.so"   # node-llama-cpp's own helpers: not used
[ -f "$tmp/package/LICENSE" ] && cp "$tmp/package/LICENSE" "$tmp/out/licenses/node-llama-cpp-linux-x64.LICENSE"
rm -rf "$tmp/package"
tar -xzf "$deps/npm/$SRC_TGZ" -C "$tmp" package/llama/gitRelease.bundle package/llama/binariesGithubRelease.json package/LICENSE
got_release=$(sed -n 's/.*"release": *"\([^"]*\)".*/\1/p' "$tmp/package/llama/binariesGithubRelease.json")
if [ "$got_release" != "$LLAMA_RELEASE" ]; then
  echo "install-llama.sh: the bundle is llama.cpp $got_release, not the pinned $LLAMA_RELEASE" >&2
  exit 1
fi
cp "$tmp/package/LICENSE" "$tmp/out/licenses/node-llama-cpp.LICENSE"
git -c advice.detachedHead=false clone -q "$tmp/package/llama/gitRelease.bundle" "$tmp/src"
cp "$tmp/src/include/llama.h" "$tmp/out/include/"
cp "$tmp"/src/ggml/include/*.h "$tmp/out/include/"
cp "$tmp"/src/models/ggml-vocab-*.gguf "$tmp/out/models/"
cp "$tmp/src/LICENSE" "$tmp/out/licenses/llama.cpp.LICENSE"
echo "$stamp" > "$tmp/out/VERSION"
rm -rf "$dst"
mv "$tmp/out" "$dst"
echo "install-llama: llama.cpp $LLAMA_RELEASE (node-llama-cpp $NLC_VERSION) in $dst" >&2
