#!/usr/bin/env bash
# Fetch the pinned llama.cpp (the one dependency not from Debian) into
# .deps/llama.cpp/ of the checkout, or $SCDB_DEPS_DIR/llama.cpp.  Idempotent:
# nothing is fetched when the unpacked tree is there and its stamp names the
# pinned version.
#
#   scripts/install-llama.sh           fetch (npm pack, no install scripts run),
#                                      check sha256, unpack
#   scripts/install-llama.sh --check   exit 0 when installed, 1 when not
#   scripts/install-llama.sh --source [--cuda] [--arch LIST] [--jobs N] [--dest DIR]
#                                      build the `llama` target of the same
#                                      pinned bundle from source instead of
#                                      unpacking the prebuilt libraries (a few
#                                      minutes on the CPU; --cuda: with ggml's
#                                      CUDA backend, nvcc needed, --arch the
#                                      CMAKE_CUDA_ARCHITECTURES, default
#                                      "native" when a GPU answers, else 90).
#                                      --dest puts the tree elsewhere (default
#                                      .deps/llama.cpp); point CMake at it with
#                                      -DSCDB_LLAMA_DIR=DIR.  scripts/gpu-check.sh
#                                      uses this for its llama.cpp step.
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

source_build=0 cuda=0 arch="" jobs=2 check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1; shift ;;
    --source) source_build=1; shift ;;
    --cuda) cuda=1; source_build=1; shift ;;
    --arch|--jobs|--dest)
      [ $# -ge 2 ] && [ -n "$2" ] || { echo "install-llama.sh: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --arch) arch="$2" ;;
        --jobs) case "$2" in *[!0-9]*|0) echo "install-llama.sh: --jobs '$2': want a positive count" >&2; exit 2 ;; esac
                jobs="$2" ;;
        --dest) dst="$2" ;;
      esac
      shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;   # the header comment
    *) echo "install-llama.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$arch" ] && [ $cuda -eq 0 ]; then
  echo "install-llama.sh: --arch '$arch' is the CUDA architectures of a --cuda build; add --cuda" >&2
  exit 2
fi
if [ $source_build -eq 1 ]; then
  stamp="$stamp built from source"
  [ $cuda -eq 1 ] && stamp="$stamp with CUDA${arch:+ ($arch)}"
fi
installed() { [ -f "$dst/VERSION" ] && [ "$(cat "$dst/VERSION")" = "$stamp" ]; }
if [ $check -eq 1 ]; then installed; exit $?; fi
installed && exit 0

if [ $source_build -eq 0 ] && { [ "$(uname -m)" != x86_64 ] || [ "$(uname -s)" != Linux ]; }; then
  echo "install-llama.sh: the pinned prebuilt llama.cpp is for Linux x86_64; this is $(uname -sm)." >&2
  echo "  --source builds the same release here; or scdb builds without it (SCDB_LLAMA off) and the" >&2
  echo "  llama.cpp tests skip." >&2
  exit 1
fi
need=()
command -v npm >/dev/null || need+=(npm)
command -v git >/dev/null || need+=(git)
if [ $source_build -eq 1 ]; then
  command -v cmake >/dev/null || need+=(cmake)
  command -v g++ >/dev/null || need+=(g++)
fi
if [ $cuda -eq 1 ] && ! command -v nvcc >/dev/null; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"
  else echo "install-llama.sh: --cuda needs nvcc (the CUDA toolkit); none on PATH or in /usr/local/cuda" >&2; exit 1; fi
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "install-llama: installing ${need[*]} (Debian)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$deps/npm" "$(dirname "$dst")"
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
[ $source_build -eq 1 ] || fetch "@node-llama-cpp/linux-x64@$NLC_VERSION" "$BIN_TGZ" "$BIN_SHA"

tmp="$(mktemp -d "$deps/.unpack.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/out/lib" "$tmp/out/include" "$tmp/out/models" "$tmp/out/licenses"
if [ $source_build -eq 0 ]; then
  tar -xzf "$deps/npm/$BIN_TGZ" -C "$tmp" package/bins/linux-x64 package/LICENSE 2>/dev/null ||
    tar -xzf "$deps/npm/$BIN_TGZ" -C "$tmp" package/bins/linux-x64
  cp "$tmp"/package/bins/linux-x64/lib*.so "$tmp/out/lib/"
  rm -f "$tmp/out/lib/libllama-common.so"   # node-llama-cpp's own helpers: not used
  [ -f "$tmp/package/LICENSE" ] && cp "$tmp/package/LICENSE" "$tmp/out/licenses/node-llama-cpp-linux-x64.LICENSE"
  rm -rf "$tmp/package"
fi
tar -xzf "$deps/npm/$SRC_TGZ" -C "$tmp" package/llama/gitRelease.bundle package/llama/binariesGithubRelease.json package/LICENSE
got_release=$(sed -n 's/.*"release": *"\([^"]*\)".*/\1/p' "$tmp/package/llama/binariesGithubRelease.json")
if [ "$got_release" != "$LLAMA_RELEASE" ]; then
  echo "install-llama.sh: the bundle is llama.cpp $got_release, not the pinned $LLAMA_RELEASE" >&2
  exit 1
fi
cp "$tmp/package/LICENSE" "$tmp/out/licenses/node-llama-cpp.LICENSE"
git -c advice.detachedHead=false clone -q "$tmp/package/llama/gitRelease.bundle" "$tmp/src"
if [ $source_build -eq 1 ]; then
  # the library only: no common, tools, server, tests or network code
  flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON
         -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF
         -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF
         -DLLAMA_OPENSSL=OFF
         # the libraries find each other where they are copied to (libggml
         # needs libggml-cpu, and libggml-cuda with --cuda), as the
         # prebuilt's do, not in this temporary build folder
         -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN')
  if [ $cuda -eq 1 ]; then
    if [ -z "$arch" ]; then
      if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then arch=native; else arch=90; fi
    fi
    flags+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$arch")
  fi
  echo "install-llama: building llama.cpp $LLAMA_RELEASE from the bundle$([ $cuda -eq 1 ] && echo " with CUDA ($arch)") at -j$jobs ..." >&2
  t0=$(date +%s)
  cmake -S "$tmp/src" -B "$tmp/build" "${flags[@]}" >"$tmp/cmake.log" 2>&1 ||
    { tail -30 "$tmp/cmake.log" >&2; echo "install-llama.sh: configuring llama.cpp failed (above)" >&2; exit 1; }
  cmake --build "$tmp/build" --target llama -j "$jobs" >"$tmp/build.log" 2>&1 ||
    { tail -30 "$tmp/build.log" >&2; echo "install-llama.sh: building llama.cpp failed (above)" >&2; exit 1; }
  cp -a "$tmp"/build/bin/lib*.so* "$tmp/out/lib/"
  echo "install-llama: built in $(( $(date +%s) - t0 )) s: $(cd "$tmp/out/lib" && ls lib*.so | tr '\n' ' ')" >&2
fi
cp "$tmp/src/include/llama.h" "$tmp/out/include/"
cp "$tmp"/src/ggml/include/*.h "$tmp/out/include/"
cp "$tmp"/src/models/ggml-vocab-*.gguf "$tmp/out/models/"
cp "$tmp/src/LICENSE" "$tmp/out/licenses/llama.cpp.LICENSE"
echo "$stamp" > "$tmp/out/VERSION"
rm -rf "$dst"
mv "$tmp/out" "$dst"
echo "install-llama: llama.cpp $LLAMA_RELEASE (node-llama-cpp $NLC_VERSION) in $dst" >&2
