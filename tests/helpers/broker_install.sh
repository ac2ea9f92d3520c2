#!/bin/sh
# broker_install.sh BUILD_DIR — install libscdb into a temp prefix and build
# a client against it three ways: pkg-config (shared), libscdb.a,
# and CMake find_package(scdb) (scdb::scdb, scdb::scdb_static).  Each program
# connects to a broker that is not there and expects SCDB_ETIMEDOUT.
set -eu
build="$1"
tmp=$(mktemp -d /tmp/test_libscdb_install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cat > "$tmp/t.c" <<'C'
#include <stdio.h>
#include "scdb.h"
int main(void)
{
    scdb_opts o = {.endpoint = "ipc:///nonexistent/scdb-install-test.sock", .timeout_ms = 100};
    scdb *h = NULL;
    scdb_err e = scdb_connect(&o, &h);
    printf("%s\n", scdb_strerror(e));
    return e == SCDB_ETIMEDOUT ? 0 : 1;
}
C
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib64/pkgconfig"
lib=$(pkg-config --variable=libdir scdb)
cc -Wall -Werror "$tmp/t.c" $(pkg-config --cflags --libs scdb) -Wl,-rpath,"$lib" -o "$tmp/t_shared"
"$tmp/t_shared"
# libscdb.a with the shared system libraries (Debian's static libzmq
# dependencies are not installable: norm.pc names a bare libprotokit.a)
cc -Wall -Werror "$tmp/t.c" $(pkg-config --cflags scdb) "$lib/libscdb.a" \
   -lzmq -lprotobuf-c -lpthread -lrt -lm -o "$tmp/t_static"
"$tmp/t_static"
mkdir "$tmp/cm"
cat > "$tmp/cm/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.22)
project(t C)
find_package(scdb 0.1 REQUIRED)
add_executable(t_cm ../t.c)
target_link_libraries(t_cm PRIVATE scdb::scdb)
add_executable(t_cm_static ../t.c)
target_link_libraries(t_cm_static PRIVATE scdb::scdb_static)
CM
cmake -S "$tmp/cm" -B "$tmp/cm/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm/b" >/dev/null
"$tmp/cm/b/t_cm"
"$tmp/cm/b/t_cm_static"
echo "libscdb install: ok"
