"""Start a private scdb broker for a script or a test.

    with Broker() as b:                  # temp dir, ipc socket and store in it
        with scdb.Client(b.endpoint) as c: ...

The broker is scdb-broker (the same program as `scdb serve`):
$SCDB_BROKER_BIN, else build/broker/scdb-broker of the checkout, else the
installed one beside these examples (scdb_paths.broker_bin).  Its
config is written the way `scdb demo` writes one: the family's models
(base, code, manpages), the base producer's SCD codebook "base-scd" and one
pair per specialist, the DistillCache policy.  `raw_dtype` sets the payload
dtype of the raw/<model> codebooks.  Readiness is a connection that a broker
answers (scdb.Client pings), polled until the deadline — never a fixed sleep.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import scdb

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scdb_paths import broker_bin, data_dir  # noqa: E402

DATA_DIR = data_dir()
SPECIALISTS = ("code", "manpages")


def write_config(path, endpoint, store, data=DATA_DIR, raw_dtype="f16", extra=""):
    models = ("base",) + SPECIALISTS
    with open(path, "w") as f:
        f.write(f"[broker]\nendpoint = {endpoint}\ndata_dir = {store}\nblock_tokens = 64\n"
                f"log_level = warn\nheartbeat_timeout_ms = 5000\ndevice = cpu\nno_sync = 1\n"
                f"{extra}\n")
        for m in models:
            f.write(f"[model {m}]\nconfig = {data}/models/{m}/config.json\n"
                    f"raw_dtype = {raw_dtype}\n\n")
        f.write(f"[policy distillcache]\nfile = {data}/policies/distillcache_base.safetensors\n\n")
        f.write(f"[codebook base-scd]\nkind = scd\nmodel = base\n"
                f"file = {data}/codebooks/base.safetensors\n\n")
        for m in SPECIALISTS:
            f.write(f"[pair base-scd {m}]\ndecoder = scd\nfile = {data}/pairs/base__{m}.safetensors\n\n")


class Broker:
    """A broker process on a private temp dir (socket, store, config, log)."""

    def __init__(self, raw_dtype="f16", extra="", ready_s=60.0):
        self.tmp = tempfile.mkdtemp(prefix="scdb-py-")
        self.endpoint = f"ipc://{self.tmp}/broker.sock"
        self.config = os.path.join(self.tmp, "broker.ini")
        self.log = os.path.join(self.tmp, "broker.log")
        write_config(self.config, self.endpoint, os.path.join(self.tmp, "store"),
                     raw_dtype=raw_dtype, extra=extra)
        self.proc = None
        self.start(ready_s)

    def start(self, ready_s=60.0):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([broker_bin(), "--config", self.config],
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited {self.proc.returncode}: {self.log_text()}")
            try:
                scdb.Client(self.endpoint, timeout_ms=200).close()
                return
            except (scdb.TimeoutError, scdb.NotFoundError, scdb.ClosedError):
                # not up yet: no socket, nothing listening, or no reply yet
                time.sleep(0.02)
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"broker not answering after {ready_s} s: "
                                       f"{self.log_text()}")

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()[-2000:]

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Stop the broker (SIGTERM: drain, exit 0); its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rc, self.proc = self.proc.returncode, None
        return rc

    def close(self):
        rc = self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
