#!/bin/sh
# broker_install.sh BUILD_DIR — install libscdb into a temp prefix and build
# a client against it three ways: pkg-config (shared, found at run time
# through the .pc file's RPATH, no LD_LIBRARY_PATH), libscdb.a, and CMake
# find_package(scdb) (scdb::scdb, scdb::scdb_static).  Each program connects
# to a broker that is not there and expects SCDB_ENOTFOUND at once, with the
# connect-time message.  Then: the
# installed headers are exactly scdb.h, kv_cache.h, recompute.h and scdb_err.h, every
# function they declare is exported by libscdb.so, and nothing else is.
set -eu
build="$1"
tmp=$(mktemp -d /tmp/test_libscdb_install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cat > "$tmp/t.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "scdb.h"
int main(void)
{
    scdb_opts o = {.endpoint = "ipc:///nonexistent/scdb-install-test.sock", .timeout_ms = 100};
    scdb *h = NULL;
    scdb_err e = scdb_connect(&o, &h);
    printf("%s: %s\n", scdb_strerror(e), scdb_connect_error());
    return e == SCDB_ENOTFOUND && strstr(scdb_connect_error(), "no broker socket") ? 0 : 1;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib64/pkgconfig"
lib=$(pkg-config --variable=libdir scdb)
cc -Wall -Werror "$tmp/t.c" $(pkg-config --cflags --libs scdb) -o "$tmp/t_shared"
env -u LD_LIBRARY_PATH "$tmp/t_shared"
# libscdb.a with the shared system libraries (Debian's static libzmq
# dependencies are not installable: norm.pc names a bare libprotokit.a)
cc -Wall -Werror "$tmp/t.c" $(pkg-config --cflags scdb) "$lib/libscdb.a" \
   -lzmq -lprotobuf-c -lcjson -lpthread -lrt -lm -o "$tmp/t_static"
"$tmp/t_static"
mkdir "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.22)
project(t C)
find_package(scdb 0.2 REQUIRED)
add_executable(t_cm ../t.c)
target_link_libraries(t_cm PRIVATE scdb::scdb)
add_executable(t_cm_static ../t.c)
target_link_libraries(t_cm_static PRIVATE scdb::scdb_static)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/b" >/dev/null
"$tmp/cm/b/t_cm"
"$tmp/cm/b/t_cm_static"
# the installed API surface
inc=$(pkg-config --variable=includedir scdb)/scdb
[ "$(ls "$inc" | sort | tr '\n' ' ')" = "kv_cache.h recompute.h scdb.h scdb_err.h " ] \
  || { echo "installed headers: $(ls "$inc")"; exit 1; }
so=$(ls "$lib"/libscdb.so.* | head -1)
nm -D --defined-only "$so" | awk '$2 ~ /^[TDBR]$/ {sub(/@.*/, "", $3); print $3}' | sort -u > "$tmp/exported"
# every function declared at the start of a line in the installed headers
# (comments stripped; static inline helpers are not library symbols)
cat "$inc"/*.h | sed 's|/\*.*\*/||g' | sed '/\/\*/,/\*\//d' | grep -v 'static inline' \
  | grep -oE '^[a-z_ ]+[ *]+(scdb_[a-z0-9_]+)\(' | sed -E 's/.*(scdb_[a-z0-9_]+)\($/\1/' | sort -u > "$tmp/declared"
if ! cmp -s "$tmp/declared" "$tmp/exported"; then
  echo "libscdb.so exports differ from the installed declarations (< declared only, > exported only):"
  diff "$tmp/declared" "$tmp/exported" || true
  exit 1
fi
echo "libscdb exports exactly the $(wc -l < "$tmp/declared") declared functions"
echo "libscdb install: ok"
