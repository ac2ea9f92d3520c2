#!/usr/bin/env bash
# test_abi.sh check|baseline LIBSCDB SOURCE_DIR — libscdb's ABI against the
# baseline committed in client/abi/libscdb.abi (docs/DESIGN.md "libscdb's ABI"):
#
#   check     abidiff (Debian's abigail-tools) of the baseline against the
#             built library, types limited to the installed headers (scdb.h,
#             kv_cache.h, recompute.h, scdb_err.h).  Fails on any removed or changed
#             function, variable, type or soname; functions added are
#             compatible, but only in a version node the baseline does not
#             have (a released node never grows).  Exit 77 (a skip for
#             CTest) without abidiff or without debug info in the library.
#             client/abi/libscdb.abignore lists the changes that are
#             compatible by design (the append-only error enum).
#   baseline  write the baseline from the built library (at a release, or
#             after a deliberate break with a new soname):
#             cmake --build build --target abi-baseline
set -u
mode="$1" lib="$2" src="$3"
base="$src/client/abi/libscdb.abi"

if ! command -v abidw >/dev/null || ! command -v abidiff >/dev/null; then
  echo "skip: abidiff not found (scripts/install-deps.sh --test installs abigail-tools):" \
       "libscdb's ABI is not checked"
  exit 77
fi
if ! readelf -S "$lib" 2>/dev/null | grep -q '\.debug_info'; then
  echo "skip: $lib has no debug info (configure with CMAKE_BUILD_TYPE=RelWithDebInfo or" \
       "Debug): abidiff cannot compare types without it"
  exit 77
fi

tmp=$(mktemp -d /tmp/test_abi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# the installed headers, alone in one folder: libabigail takes the types
# declared in them as the public ones (by file name) and drops the others,
# so the opaque handles' insides (libscdb_int.h) are not ABI
mkdir "$tmp/public"
cp "$src/client/scdb.h" "$src/kernels/kv_cache.h" "$src/schema/recompute.h" "$src/common/scdb_err.h" "$tmp/public/" || exit 1

if [ "$mode" = baseline ]; then
  mkdir -p "$(dirname "$base")"
  abidw --no-corpus-path --no-comp-dir-path --short-locs --drop-private-types \
    --headers-dir "$tmp/public" --out-file "$base" "$lib" || exit 1
  echo "wrote $base from $lib ($(grep -c '<elf-symbol ' "$base") symbols): commit it"
  exit 0
fi
[ "$mode" = check ] || { echo "usage: test_abi.sh check|baseline LIB SOURCE_DIR" >&2; exit 2; }
[ -f "$base" ] || { echo "FAIL no ABI baseline at $base"; exit 1; }

hd2=(--headers-dir2 "$tmp/public" --suppressions "$src/client/abi/libscdb.abignore")
fail=0

# 1. nothing removed or changed (additions filtered out: they are compatible)
abidiff --no-added-syms --drop-private-types "${hd2[@]}" "$base" "$lib" >"$tmp/breaks" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  echo "ok   nothing removed or changed against the baseline"
else
  echo "FAIL libscdb's ABI changed incompatibly against $base (abidiff exit $rc):"
  cat "$tmp/breaks"
  echo "     restore what was removed or changed, or make it a break: a new soname" \
       "(SCDB_SOVERSION in client/CMakeLists.txt) and a new baseline (docs/DESIGN.md \"libscdb's ABI\")"
  fail=1
fi

# 2. additions: listed, and each in a version node the baseline lacks
abidiff --drop-private-types "${hd2[@]}" "$base" "$lib" >"$tmp/all" 2>&1
released=$(grep -o "version='[^']*'" "$base" | sort -u | sed "s/version='\(.*\)'/\1/")
added=$(sed -n "s/.*\[A\] .*{\([a-z_0-9]*\)@@\?\([A-Za-z_0-9.]*\)}.*/\1 \2/p" "$tmp/all")
n_added=0
while read -r sym ver; do
  [ -n "$sym" ] || continue
  n_added=$((n_added + 1))
  if [ -z "$ver" ] || printf '%s\n' "$released" | grep -qx "$ver"; then
    echo "FAIL $sym was added to version node '${ver:-none}', which is released: put it in" \
         "the next release's node in client/libscdb.map"
    fail=1
  else
    echo "ok   added $sym@$ver (a new node: compatible)"
  fi
done <<<"$added"
[ $n_added -eq 0 ] && echo "ok   no functions added"
exit $fail
