#!/usr/bin/env bash
# test_package.sh BUILD — `cpack -G DEB` builds scdb_<version>_amd64.deb
# with everything an operator needs (issue 14 item 4), unpacked into a
# scratch root (dpkg -x: nothing is installed on this machine, no
# maintainer script runs): the programs, libscdb (shared, static, headers,
# pkg-config, CMake), the unit, the config (a conffile), the bundled data
# under /usr/share/scdb and the man pages; then `scdb demo` runs from the
# scratch root, the packaged broker serves with the packaged config (its
# paths moved into the root), and the unit passes `systemd-analyze verify`
# (paths moved the same way) where systemd-analyze exists.  Skipped (77)
# without cpack or dpkg-deb.
set -u
build="$1"
for t in cpack dpkg-deb dpkg; do
  command -v $t >/dev/null || { echo "skipped: $t not found (scripts/install-deps.sh --test)"; exit 77; }
done
tmp=$(mktemp -d /tmp/test_package.XXXXXX)
bpid=
cleanup() { [ -n "$bpid" ] && kill -TERM "$bpid" 2>/dev/null && wait "$bpid"; rm -rf "$tmp"; }
trap cleanup EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
check() { if eval "$2"; then ok "$1"; else bad "$1"; fi; }

ver=$("$build/cli/scdb" --version | awk '{print $2}')
( cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/pkg" ) >"$tmp/cpack.log" 2>&1
code=$?
deb="$tmp/pkg/scdb_${ver}_amd64.deb"
check "cpack -G DEB builds scdb_${ver}_amd64.deb" '[ $code -eq 0 ] && [ -f "$deb" ]' \
  || { cat "$tmp/cpack.log"; echo "$pass passed, $((fail)) failed"; exit 1; }

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$tmp/list"
missing=
for f in /usr/bin/scdb /usr/bin/scdb-broker /usr/lib/libscdb.so /usr/lib/libscdb.a \
         /usr/include/scdb/scdb.h /usr/include/scdb/kv_cache.h /usr/include/scdb/recompute.h \
         /usr/include/scdb/scdb_err.h \
         /usr/lib/pkgconfig/scdb.pc /usr/lib/cmake/scdb/scdbConfig.cmake \
         /usr/lib/systemd/system/scdb-broker.service /etc/scdb/scdb-broker.ini \
         /usr/share/scdb/models/base/model.safetensors /usr/share/scdb/models/code/config.json \
         /usr/share/scdb/models/manpages/config.json /usr/share/scdb/codebooks/base.safetensors \
         /usr/share/scdb/pairs/base__code.safetensors /usr/share/scdb/pairs/base__manpages.safetensors \
         /usr/share/scdb/policies/distillcache_base.safetensors /usr/share/scdb/heldout/manpages.txt \
         /usr/share/man/man1/scdb.1.gz /usr/share/man/man5/scdb-broker.ini.5.gz; do
  grep -qx "$f" "$tmp/list" || missing="$missing $f"
done
check "the package holds programs, library, unit, config, data, man pages" '[ -z "$missing" ]' \
  || echo "missing:$missing"
check "nothing outside /usr and /etc/scdb" '! grep -vE "^/(usr(/.*)?|etc(/scdb(/.*)?)?)?/?$" "$tmp/list" | grep -q .'
dpkg-deb -I "$deb" >"$tmp/info"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles >"$tmp/conffiles" 2>/dev/null
check "the config is a conffile" 'grep -qx /etc/scdb/scdb-broker.ini "$tmp/conffiles"'
check "postinst creates the scdb user" \
  'dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./postinst | grep -q "adduser --system"'
check "Depends names the shared libraries it links (libmicrohttpd, libsystemd, libzmq)" \
  'grep -q "^ Depends:.*libmicrohttpd12.*libsystemd0.*libzmq5" "$tmp/info"'
# issue 25 item 12: what the Python module needs, and ldconfig for libscdb
if grep -q "/dist-packages/scdb\.cpython-" "$tmp/list"; then
  pyver=$(sed -n "s|^/usr/lib/python3\.\([0-9]*\)/dist-packages/scdb\.cpython.*|\1|p" "$tmp/list" | head -1)
  check "Recommends the module's python3 (3.$pyver) and python3-numpy" \
    'grep -q "^ Recommends:.*python3 (>= 3\.$pyver~), python3 (<< 3\.$((pyver + 1))).*python3-numpy" "$tmp/info"' \
    || grep -E "^ (Depends|Recommends|Suggests):" "$tmp/info"
fi
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./triggers >"$tmp/triggers" 2>/dev/null
check "an ldconfig trigger for libscdb (triggers: activate-noawait ldconfig)" \
  'grep -qx "activate-noawait ldconfig" "$tmp/triggers"'

# The maintainer scripts for real (issue 25 item 12), in a private mount
# namespace where /etc and /var/lib are scratch copies: postinst creates the
# scdb user and group; an operator adds a user to the group (as the unit's
# comment says); postrm purge leaves neither the user nor the group.  Needs
# root and unshare; skipped without.
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v usermod >/dev/null &&
   unshare -m --propagation private true 2>/dev/null; then
  mkdir -p "$tmp/ctrl" "$tmp/ns/etc" "$tmp/ns/varlib"
  dpkg-deb --ctrl-tarfile "$deb" | tar -x -C "$tmp/ctrl" ./postinst ./postrm
  cp -a /etc/. "$tmp/ns/etc/"
  unshare -m --propagation private sh -c '
    mount --bind "$1/etc" /etc && mount --bind "$1/varlib" /var/lib || exit 90
    if getent passwd scdb >/dev/null || getent group scdb >/dev/null; then exit 91; fi
    sh "$2/postinst" configure >/dev/null || exit 92
    getent passwd scdb >/dev/null && getent group scdb >/dev/null || exit 93
    usermod -a -G scdb nobody && getent group scdb | grep -q nobody || exit 94
    sh "$2/postrm" purge >/dev/null || exit 95
    getent passwd scdb >/dev/null && exit 96
    getent group scdb >/dev/null && exit 97
    exit 0' sh "$tmp/ns" "$tmp/ctrl" >"$tmp/ns.log" 2>&1
  code=$?
  check "postinst makes the scdb user and group; purge removes both, the group with a member (exit $code)" \
    '[ $code -eq 0 ]' || cat "$tmp/ns.log"
else
  echo "skip maintainer scripts in a mount namespace: needs root and unshare"
fi

root="$tmp/root"
dpkg -x "$deb" "$root"
check "the unit starts /usr/bin/scdb-broker with /etc/scdb/scdb-broker.ini" \
  'grep -qx "ExecStart=/usr/bin/scdb-broker --config /etc/scdb/scdb-broker.ini" "$root/usr/lib/systemd/system/scdb-broker.service"'
check "the unit: Type=notify, ExecReload SIGHUP, hardening, state and runtime dirs" \
  'u="$root/usr/lib/systemd/system/scdb-broker.service";
   grep -qx "Type=notify" "$u" && grep -q "^ExecReload=.*-HUP" "$u" && grep -qx "NoNewPrivileges=yes" "$u" &&
   grep -qx "ProtectSystem=strict" "$u" && grep -qx "StateDirectory=scdb" "$u" && grep -qx "RuntimeDirectory=scdb" "$u"'
check "the config names every model, pair, codebook and policy the package ships (issue 25 item 5)" \
  'sed "s|/usr/share/scdb|$root/usr/share/scdb|g" "$root/etc/scdb/scdb-broker.ini" >"$tmp/cover.ini" &&
   "$(dirname "$0")/helpers/config_covers_assets.sh" "$root/usr/share/scdb" "$tmp/cover.ini" >"$tmp/cover"' \
  || cat "$tmp/cover"
# issue 25 item 4: the packaged client commands default to the packaged
# service's socket (the config beside them: ROOT/etc/scdb for ROOT/usr)
mkdir -p "$tmp/xdg"   # no broker of ours on the per-user socket
env -u SCDB_ENDPOINT XDG_RUNTIME_DIR="$tmp/xdg" "$root/usr/bin/scdb" stats --help >"$tmp/stats-help" 2>&1
check "scdb stats --help: the default is the packaged service's ipc:///run/scdb/broker.sock" \
  'grep -q "Here and now: ipc:///run/scdb/broker.sock" "$tmp/stats-help" &&
   grep -q "$root/etc/scdb/scdb-broker.ini" "$tmp/stats-help"' || cat "$tmp/stats-help"
check "the config names /usr/share/scdb, /var/lib/scdb, /run/scdb" \
  'c="$root/etc/scdb/scdb-broker.ini"; grep -q "^data_dir = /var/lib/scdb" "$c" &&
   grep -q "^endpoint = ipc:///run/scdb/broker.sock" "$c" &&
   [ "$(grep -E "^(config|file) = " "$c" | grep -vc "= /usr/share/scdb/")" = 0 ]'

mkdir -p "$tmp/demo-tmp"
TMPDIR="$tmp/demo-tmp" "$root/usr/bin/scdb" demo --prefix 128 --gen 8 --device cpu >"$tmp/demo" 2>&1
code=$?
check "scdb demo from the unpacked package (exit $code)" \
  '[ $code -eq 0 ] && grep -q "^demo: ok" "$tmp/demo" && grep -q "^scdb demo: data $root/usr/share/scdb," "$tmp/demo" && grep -q "bytes of heldout/" "$tmp/demo"' \
  || cat "$tmp/demo"

# the packaged config, its paths moved into the scratch root
sed "s|/usr/share/scdb|$root/usr/share/scdb|g" "$root/etc/scdb/scdb-broker.ini" >"$tmp/broker.ini"
"$root/usr/bin/scdb-broker" --config "$tmp/broker.ini" --endpoint "ipc://$tmp/b.sock" \
  --data-dir "$tmp/store" --metrics-listen 127.0.0.1:0 --no-sync 1 >"$tmp/blog" 2>&1 &
bpid=$!
for _ in $(seq 1 600); do
  grep -q "serving ipc://" "$tmp/blog" && break
  kill -0 $bpid 2>/dev/null || break
  sleep 0.1
done
check "the packaged broker serves with the packaged config" 'grep -q "serving ipc://" "$tmp/blog"' \
  || cat "$tmp/blog"
"$root/usr/bin/scdb" stats --endpoint "ipc://$tmp/b.sock" >"$tmp/stats" 2>&1; code=$?
check "the packaged scdb stats answers it" '[ $code -eq 0 ] && grep -q "^| broker instance |" "$tmp/stats"'
kill -TERM $bpid; wait $bpid; code=$?; bpid=
check "it stops cleanly" '[ $code -eq 0 ]'

if command -v systemd-analyze >/dev/null; then
  mkdir -p "$tmp/unit"
  sed -e "s|/usr/bin/|$root/usr/bin/|" -e "s|/etc/scdb/|$root/etc/scdb/|" \
    "$root/usr/lib/systemd/system/scdb-broker.service" >"$tmp/unit/scdb-broker.service"
  MANPATH="$root/usr/share/man" systemd-analyze verify "$tmp/unit/scdb-broker.service" \
    >"$tmp/verify" 2>&1; code=$?
  check "systemd-analyze verify: the packaged unit" '[ $code -eq 0 ]' || cat "$tmp/verify"
else
  echo "skip systemd-analyze verify: systemd-analyze not found"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
