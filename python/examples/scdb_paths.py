"""Where the examples find scdb's assets, tools and broker: in a checkout and
as installed, the same way the scdb command does.

    checkout                        installed (cmake --install, the package)
    <src>/python/examples/  (here)  <prefix>/share/scdb/python/examples/
    <src>/data/             assets  <prefix>/share/scdb/   (models/, heldout/, ...)
    <src>/tools/                    <prefix>/share/scdb/tools/
    <src>/build/broker/scdb-broker  <prefix>/bin/scdb-broker

$SCDB_DATA overrides the asset folder (as for `scdb`), $SCDB_SOURCE_DIR the
checkout, $SCDB_BROKER_BIN the broker program.
"""
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
# the checkout, or the installed <prefix>/share/scdb: two levels up either way
ROOT = os.environ.get("SCDB_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))


def data_dir():
    """The shipped assets: $SCDB_DATA, else the checkout's data/, else (as
    installed) <prefix>/share/scdb itself."""
    env = os.environ.get("SCDB_DATA")
    if env:
        return env
    checkout = os.path.join(ROOT, "data")
    return checkout if os.path.isdir(checkout) else ROOT


def tools_dir():
    """tools/ of the checkout, or <prefix>/share/scdb/tools."""
    return os.path.join(ROOT, "tools")


def broker_bin():
    """The scdb-broker program: $SCDB_BROKER_BIN, else the checkout's build,
    else the installed <prefix>/bin/scdb-broker, else the one on $PATH."""
    env = os.environ.get("SCDB_BROKER_BIN")
    tried = [env] if env else [os.path.join(ROOT, "build", "broker", "scdb-broker"),
                               os.path.join(ROOT, "..", "..", "bin", "scdb-broker")]
    for b in tried:
        if os.access(b, os.X_OK):
            return os.path.normpath(b)
    if not env and shutil.which("scdb-broker"):
        return shutil.which("scdb-broker")
    raise FileNotFoundError(f"no broker program at {' or '.join(tried)} or on $PATH "
                            "(build first, or set SCDB_BROKER_BIN)")
