"""`cmake --install` puts the scdb module and its stub where the system
Python finds them (relative to the prefix), linked to the installed libscdb."""
import glob
import os
import subprocess
import sys

import pytest


def test_installed_module_imports(tmp_path):
    build = os.environ.get("SCDB_BUILD_DIR")
    if not build:
        pytest.skip("SCDB_BUILD_DIR is not set (CTest sets it)")
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True,
                   capture_output=True, timeout=120)
    site = glob.glob(str(prefix / "lib" / "python3.*" / "dist-packages"))
    assert len(site) == 1, os.listdir(prefix / "lib")
    assert os.path.exists(os.path.join(site[0], "scdb.pyi"))
    assert glob.glob(os.path.join(site[0], "scdb.cpython-*.so"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = site[0]
    code = ("import scdb, pydoc; assert scdb.__file__.startswith(%r), scdb.__file__; "
            "print(pydoc.plain(pydoc.render_doc(scdb)))" % site[0])
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "class Client" in r.stdout and "class Arena" in r.stdout
