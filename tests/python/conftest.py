"""Fixtures of the scdb Python tests (run by CTest as test_python; by hand:
PYTHONPATH=build/python:python/examples /usr/bin/python3 -m pytest tests/python).

Every broker is a real scdb-broker on a private ipc:// path in a temp dir
(python/examples/scdb_broker.py), ready once a Client connects."""
import numpy as np
import pytest

try:
    import scdb
except ImportError as e:  # the module is built into build/python
    raise ImportError(f"{e}: set PYTHONPATH=build/python:python/examples (CTest does)") from e

from scdb_broker import Broker


@pytest.fixture(scope="session")
def broker():
    """One broker for the session; raw/<model> payloads are f32 (exact)."""
    b = Broker(raw_dtype="f32")
    yield b
    rc = b.close()
    assert rc == 0, "broker did not drain and exit 0 on SIGTERM"


@pytest.fixture()
def own_broker():
    """A broker of the test's own (it may be stopped)."""
    b = Broker(raw_dtype="f32")
    yield b
    b.close()


@pytest.fixture()
def consumer(broker):
    with scdb.Client(broker.endpoint, timeout_ms=5000) as c:
        c.register("base", "consumer")
        yield c


@pytest.fixture()
def producer(broker):
    with scdb.Client(broker.endpoint, timeout_ms=5000) as c:
        c.register("base", "producer")
        yield c


_seed = [1000]


@pytest.fixture()
def prompt():
    """A fresh random prompt (no other test stores it): n int32 byte tokens."""
    def make(n):
        _seed[0] += 1
        return np.random.default_rng(_seed[0]).integers(0, 256, n, dtype=np.int32)
    return make


@pytest.fixture()
def raw_payload():
    """make(info, n_blocks): random f32 raw-KV payloads, an array
    [n_blocks, 2 (K, V), n_layers, block_tokens, kv_dim] (put's layout)."""
    def make(info, n_blocks, seed=0):
        rng = np.random.default_rng(seed)
        L, bt, d = info["n_layers"], info["block_tokens"], info["kv_dim"]
        return rng.standard_normal((n_blocks, 2, L, bt, d)).astype(np.float32)
    return make


@pytest.fixture()
def torch_family():
    """The family's PyTorch model (python/examples/torch_family.py), or a skip."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("PyTorch is not installed (scripts/install-deps.sh --test installs "
                    "python3-torch): the PyTorch producer/consumer tests need it")
    import torch_family
    return torch_family


@pytest.fixture(scope="session")
def data_dir():
    from scdb_broker import DATA_DIR
    return DATA_DIR
