"""scdb module against a real broker: round trips, zero-copy arenas, live
sessions, errors, closed objects, threads, reference leaks."""
import gc
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import scdb


# ------------------------------------------------------------ round trips

def test_connect_register_ping_stats(broker):
    with scdb.Client(broker.endpoint) as c:
        assert c.info is None
        st = c.stats()                       # works before register
        assert st["clients"] >= 0 and "ops" in st and isinstance(st["uptime_s"], float)
        info = c.register("code", "consumer", "base-scd")
        assert info == c.info
        assert (info["n_layers"], info["n_kv_heads"], info["head_dim"]) == (8, 2, 32)
        assert info["codebook_kind"] == "scd" and info["block_tokens"] == 64
        assert c.ping() > 0
        assert "code" in repr(c)
    assert c.closed
    c.close()                                # idempotent


def test_raw_put_lookup_get_round_trip(producer, consumer, prompt, raw_payload):
    info = producer.info
    toks = prompt(200)                       # 3 full blocks + 8 tokens
    pay = raw_payload(info, 3)
    r = producer.put(toks, pay)
    assert r == {"n_full": 3, "n_stored": 3, "n_new": 3, "n_replaced": 0}
    assert producer.put(toks, pay)["n_new"] == 0          # idempotent
    assert consumer.lookup(toks) == 192
    assert consumer.lookup(toks[:150]) == 128
    assert consumer.lookup(toks.tolist()) == 192          # converted
    assert consumer.lookup(toks.astype(np.int64)) == 192
    assert consumer.lookup(toks[::-1].copy()[::-1]) == 192  # non-contiguous: converted
    with consumer.arena(256) as a:
        assert a.k.shape == (8, 256, 64) and a.k.dtype == np.float32
        assert a.v.shape == (8, 256, 64) and a.pos.shape == (256,) and a.pos.dtype == np.int32
        assert consumer.get(toks, a) == 192 and a.n == 192
        assert consumer.last_get["tokens_written"] == 192
        # the arena holds exactly what was put (f32 raw, identity pair)
        for b in range(3):
            s = slice(64 * b, 64 * (b + 1))
            assert np.array_equal(a.k[:, s], pay[b, 0]) and np.array_equal(a.v[:, s], pay[b, 1])
        assert np.array_equal(a.pos[:192], np.arange(192))
        # zero copy: the same memory every time, and a view of the arena
        assert a.k is a.k
        assert not a.k.flags.owndata and a.k.flags.writeable and a.k.flags.c_contiguous
    assert producer.delete(toks) == 3
    assert consumer.lookup(toks) == 0


def test_put_list_of_blocks_and_bytes(producer, consumer, prompt, raw_payload):
    toks = prompt(128)
    pay = raw_payload(producer.info, 2)
    assert producer.put(toks, [pay[0].tobytes(), pay[1].tobytes()])["n_new"] == 2
    assert consumer.lookup(bytes(toks.astype(np.uint8))) == 128   # bytes are tokens too


def test_get_at_slot0_pos0(producer, consumer, prompt, raw_payload):
    toks = prompt(128)
    pay = raw_payload(producer.info, 2)
    producer.put(toks, pay)
    with consumer.arena(256) as a:
        assert consumer.get(toks, a, slot0=64, pos0=100) == 128
        assert a.n == 192
        assert np.array_equal(a.pos[64:192], np.arange(100, 228))


def test_get_with_recompute(producer, consumer, prompt, raw_payload):
    """get(recompute=...): the chosen tokens are taken out of the arena, their
    positions and ids in last_recompute (issue 40); bad settings are refused
    by name, selective is left to the caller's engine."""
    toks = prompt(192)
    pay = raw_payload(producer.info, 3)
    producer.put(toks, pay)
    with consumer.arena(256) as a:
        assert consumer.get(toks, a, recompute="tail:16") == 192
        r = consumer.last_recompute
        assert r["setting"] == "tail:16" and not r["from_default"] and r["next_pos"] == 192
        assert r["positions"] == list(range(176, 192))
        assert r["tokens"] == [int(t) for t in toks[176:192]]
        assert a.n == 176 and np.array_equal(a.pos[:176], np.arange(176))
        a.n = 0
        consumer.get(toks, a, recompute="initial:4")
        assert consumer.last_recompute["positions"] == [0, 1, 2, 3]
        assert a.n == 188 and np.array_equal(a.pos[:188], np.arange(4, 192))
        # the slots kept are the plain get's
        assert np.array_equal(a.k[:, :188], pay.transpose(1, 2, 0, 3, 4).reshape(2, 8, 192, 64)[0][:, 4:])
        a.n = 0
        consumer.get(toks, a, recompute="default")     # no default for this pair: none
        assert consumer.last_recompute["positions"] == [] and consumer.last_recompute["from_default"]
        assert a.n == 192
        for bad, words in (("tail:500", "beyond the prefix"), ("bogus:3", "unknown policy"),
                           ("tail:-1", "count"), ("selective:8", "scorer")):
            a.n = 0
            with pytest.raises(scdb.Error, match=words):
                consumer.get(toks, a, recompute=bad)


def test_torch_from_numpy_shares_arena(consumer):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    with consumer.arena(64) as a:
        t = torch.from_numpy(a.k)
        a.k[3, 5, 7] = 42.0
        assert t[3, 5, 7].item() == 42.0
        assert t.data_ptr() == a.k.ctypes.data


def test_live_session_evicts_and_maps_slots(producer, consumer, prompt, raw_payload):
    toks = prompt(256)
    producer.put(toks, raw_payload(producer.info, 4))
    with consumer.arena(320) as a:
        assert consumer.get(toks, a) == 256
        with a.session(128, "streaming", 0, n_heads=4) as s:
            assert s.info["budget"] == 128 and s.info["n_heads"] == 4
            s.add_stats()                    # the get's slots, no attention
            # append one slot by hand, with its attention
            a.pos[256] = 256
            a.k[:, 256] = 1.0
            a.n = 257
            probs = np.zeros((8, 4, 1, 320), np.float32)
            probs[..., :257] = 1.0 / 257
            assert s.step(probs) is None     # cadence 0: step never evicts
            slot_pos = s.evict()
            assert slot_pos.dtype == np.int32 and len(slot_pos) == 128 == a.n
            assert np.all(np.diff(slot_pos) > 0)          # order kept
            assert np.array_equal(a.pos[:128], slot_pos)  # compacted in place
            assert slot_pos[-1] == 256                    # streaming keeps the newest
            assert s.last_eviction["n_before"] == 257 and s.last_eviction["evicted"]
        assert s.closed


def test_session_step_on_cadence(producer, consumer, prompt, raw_payload):
    toks = prompt(128)
    producer.put(toks, raw_payload(producer.info, 2))
    with consumer.arena(160) as a:
        consumer.get(toks, a)
        s = a.session(100, "h2o", 4, n_heads=4)
        s.add_stats()
        maps = []
        for i in range(8):
            n = a.n
            a.pos[n] = 128 + i
            a.n = n + 1
            probs = np.full((8, 4, 1, 160), 1.0 / (n + 1), np.float32)
            probs[..., n + 1:] = 0
            m = s.step(probs)
            if m is not None:
                maps.append(m)
        assert len(maps) == 2 and all(len(m) == 100 for m in maps)
        s.close()


# ------------------------------------------------------------ bad input

def test_tokens_bad_dtype_shape_range(consumer):
    with pytest.raises(scdb.DtypeError):
        consumer.lookup(np.zeros(64, np.float32))
    with pytest.raises(TypeError):                       # DtypeError is a TypeError
        consumer.lookup([1, 2.5])
    with pytest.raises(scdb.DtypeError):
        consumer.lookup("text")
    with pytest.raises(scdb.DtypeError):
        consumer.lookup(None)
    with pytest.raises(scdb.ShapeError):
        consumer.lookup(np.zeros((2, 64), np.int32))
    with pytest.raises(scdb.RangeError):
        consumer.lookup(np.array([1, -1], np.int32))     # zero-copy path
    with pytest.raises(scdb.RangeError):
        consumer.lookup(np.array([2 ** 31], np.int64))
    with pytest.raises(ValueError):                      # RangeError is a ValueError
        consumer.lookup([0, 2 ** 40])
    e = pytest.raises(scdb.RangeError, consumer.lookup, [-3]).value
    assert e.code == scdb.RangeError.code and e.name == "SCDB_ERANGE" and "token 0" in e.message


def test_put_bad_payloads(producer, prompt, raw_payload):
    toks = prompt(128)
    pay = raw_payload(producer.info, 2)
    with pytest.raises(scdb.DtypeError):
        producer.put(toks, pay.astype(np.float64))
    with pytest.raises(scdb.DtypeError):
        producer.put(toks, pay.astype(np.float16))       # raw/base is f32 here
    with pytest.raises(scdb.ShapeError):
        producer.put(toks, pay.transpose(1, 0, 2, 3, 4))  # not C-contiguous
    with pytest.raises(scdb.ShapeError) as e:
        producer.put(toks, pay.tobytes()[:-4])           # not whole blocks (libscdb)
    assert "whole blocks" in e.value.message
    with pytest.raises(scdb.ShapeError):
        producer.put(toks[:64], pay)                     # more blocks than tokens hold
    with pytest.raises(scdb.NotFoundError):
        producer.put(toks, pay[1:], first_block=1)       # block 0 is not stored
    with pytest.raises(scdb.DtypeError):
        producer.put(toks, 12)


def test_register_errors(broker):
    with scdb.Client(broker.endpoint) as c:
        with pytest.raises(scdb.NotFoundError) as e:
            c.register("nosuchmodel", "consumer")
        assert "nosuchmodel" in e.value.message          # the broker's message
        with pytest.raises(scdb.InvalidError):
            c.register("base", "observer")
        with pytest.raises(scdb.MismatchError):
            c.register("code", "producer", "base-scd")
        with pytest.raises(scdb.InvalidError):
            c.lookup([1, 2, 3])                          # not registered
        with pytest.raises(scdb.UnsupportedError):
            c.register("base", "producer")
            c.states_arena(64)                           # raw codebook: no broker encode


def test_register_weights_fingerprint(broker):
    """A consumer that says which weights it runs: its pair must have been
    calibrated for them (stale pairs refused, both fingerprints named)."""
    from scdb_broker import DATA_DIR
    code = scdb.weights_fingerprint(f"{DATA_DIR}/models/code")
    other = scdb.weights_fingerprint(f"{DATA_DIR}/models/manpages")
    assert len(code) == 32 and code != other
    with scdb.Client(broker.endpoint) as c:
        assert c.register("code", "consumer", "base-scd", weights_fp=code)["decoder"] == "scd"
        c.register("code", "consumer", "base-scd", model_dir=f"{DATA_DIR}/models/code")
        with pytest.raises(scdb.MismatchError) as e:
            c.register("code", "consumer", "base-scd", weights_fp=other)
        assert code in e.value.message and other in e.value.message
        with pytest.raises(scdb.MismatchError):
            c.register("code", "consumer", "base-scd", model_dir=f"{DATA_DIR}/models/manpages")
        c.register("code", "consumer", "base-scd")             # none given: not checked
        with pytest.raises(scdb.InvalidError):
            c.register("code", "consumer", "base-scd", weights_fp="XYZ")
        with pytest.raises(scdb.InvalidError):
            c.register("code", "consumer", "base-scd", weights_fp=code, model_dir="/x")
        with pytest.raises(scdb.NotFoundError):
            c.register("code", "consumer", "base-scd", model_dir="/nonexistent/model")
    with pytest.raises(scdb.NotFoundError) as e:
        scdb.weights_fingerprint("/nonexistent/model")
    assert "/nonexistent/model" in e.value.message
    with pytest.raises(TypeError):
        scdb.weights_fingerprint(3)


def test_session_bad_probs(producer, consumer, prompt, raw_payload):
    toks = prompt(64)
    producer.put(toks, raw_payload(producer.info, 1))
    with consumer.arena(128) as a:
        consumer.get(toks, a)
        with pytest.raises(scdb.InvalidError):
            a.session(32, "streaming")                   # n_heads is required
        with pytest.raises(scdb.NotFoundError):
            a.session(32, "nosuchpolicy", n_heads=4)
        with pytest.raises(scdb.RangeError):
            a.session(1000, "streaming", n_heads=4)      # over the capacity
        s = a.session(32, "streaming", n_heads=4)
        with pytest.raises(scdb.BusyError):
            a.session(32, "streaming", n_heads=4)        # one per arena
        s.add_stats()                                    # the get's 64 slots
        a.n = 65
        good = np.zeros((8, 4, 1, 128), np.float32)
        with pytest.raises(scdb.DtypeError):
            s.add_stats(good.astype(np.float64))
        with pytest.raises(scdb.ShapeError):
            s.add_stats(np.zeros((8, 3, 1, 128), np.float32))      # n_heads 3
        with pytest.raises(scdb.ShapeError):
            s.add_stats(good[..., ::2])                             # not C-contiguous
        with pytest.raises(scdb.ShapeError):
            s.add_stats(good, n_new=2)
        with pytest.raises(scdb.InvalidError):
            s.add_stats(np.zeros((8, 4, 2, 128), np.float32))      # grew by 1, not 2
        with pytest.raises(scdb.InvalidError):
            s.add_stats(np.zeros((8, 4, 1, 16), np.float32))       # probs_slots < n
        s.add_stats(good)
        with pytest.raises(scdb.RangeError):
            a.n = 129


# ------------------------------------------------------------ closed objects

def test_closed_client(broker, prompt):
    c = scdb.Client(broker.endpoint)
    c.register("base", "consumer")
    a = c.arena(64)
    c.close()
    for call in (lambda: c.lookup(prompt(64)), c.ping, c.stats, lambda: c.arena(64),
                 lambda: c.register("base"), lambda: c.get(prompt(64), a), lambda: a.k,
                 lambda: a.n, lambda: a.session(8, n_heads=4)):
        with pytest.raises(scdb.ClosedError):
            call()
    a.close()                                            # nothing left to free
    c.close()
    with pytest.raises(scdb.ClosedError):
        with c:
            pass


def test_freed_arena(consumer, prompt):
    toks = prompt(64)
    a = consumer.arena(64)
    s = a.session(32, "streaming", n_heads=4)
    a.close()
    assert a.closed and s.closed
    with pytest.raises(scdb.ClosedError):
        consumer.get(toks, a)
    with pytest.raises(scdb.ClosedError):
        a.pos
    with pytest.raises(scdb.ClosedError):
        s.evict()
    with pytest.raises(scdb.ClosedError):
        a.session(32, n_heads=4)
    s.close()
    a.close()                                            # idempotent


def test_arena_of_another_client(broker, consumer, prompt):
    with scdb.Client(broker.endpoint) as other:
        other.register("base", "consumer")
        with other.arena(64) as a:
            with pytest.raises(scdb.InvalidError):
                consumer.get(prompt(64), a)


def test_arena_array_outlives_close(broker, producer, prompt, raw_payload):
    toks = prompt(64)
    pay = raw_payload(producer.info, 1)
    producer.put(toks, pay)
    c = scdb.Client(broker.endpoint)
    c.register("base", "consumer")
    a = c.arena(64)
    c.get(toks, a)
    k, pos = a.k, a.pos
    view = k[2, 10:20]                                   # a view of the view
    a.close()
    # documented: still valid memory (this module's own mapping), detached
    assert np.array_equal(k[:, :64], pay[0, 0])
    k[0, 0, 0] = 7.0
    assert k[0, 0, 0] == 7.0
    c.close()
    assert np.array_equal(view, pay[0, 0, 2, 10:20])
    assert pos[63] == 63
    del a, c
    gc.collect()
    assert float(k.sum()) == float(k.sum())
    del k, pos, view
    gc.collect()


def test_arena_array_alive_at_exit(broker):
    """An arena array still referenced when the interpreter exits (its Client
    and Arena collected in any order) does not crash it."""
    code = (
        "import scdb\n"
        f"c = scdb.Client({broker.endpoint!r})\n"
        "c.register('base', 'consumer')\n"
        "a = c.arena(64)\n"
        "K = a.k; P = a.pos\n"
        "a2 = c.arena(32); V = a2.v\n"
        "c.close()\n"
        "K[:] = 1.0; print(float(K.sum()), int(P[0]), V.shape)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == str(float(8 * 64 * 64))


# ------------------------------------------------------------ stopped broker

def test_stopped_broker(own_broker, prompt, raw_payload):
    p = scdb.Client(own_broker.endpoint)
    p.register("base", "producer")
    toks = prompt(64)
    p.put(toks, raw_payload(p.info, 1))
    c = scdb.Client(own_broker.endpoint, timeout_ms=300)
    c.register("base", "consumer")
    a = c.arena(64)
    k = a.k
    assert own_broker.stop() == 0                        # SIGTERM: drained, exit 0
    for call in (lambda: c.get(toks, a), c.ping, c.stats,
                 lambda: c.arena(64), lambda: a.session(8, n_heads=4)):
        with pytest.raises(scdb.TimeoutError) as e:
            call()
        assert "no reply" in e.value.message
    # a lookup knows from the retired index that its broker is gone: with no
    # socket in its place it fails at once (issue 42 item 4)
    with pytest.raises(scdb.ClosedError) as e:
        c.lookup(toks)
    assert "the broker is gone: no socket" in e.value.message
    with pytest.raises(scdb.NotFoundError) as e:            # fails fast: no socket
        scdb.Client(own_broker.endpoint, timeout_ms=200)
    assert "no broker socket" in e.value.message
    # a new broker on the same store: the handle re-registers by itself, old
    # arenas are stale (ClosedError), stored blocks survive
    own_broker.start()
    c.timeout_ms = 10000          # short timeouts were for the stopped broker only
    assert c.lookup(toks) == 64
    with pytest.raises(scdb.ClosedError):
        c.get(toks, a)
    a.close()
    k[0, 0, 0] = 1.0                                     # still valid memory
    with c.arena(64) as b:
        assert c.get(toks, b) == 64
    c.close()
    p.close()


def test_lookup_after_kill9(own_broker, prompt, raw_payload):
    """After kill -9 of the broker a handle no longer answers lookups from
    the dead broker's shared-memory index (issue 20 item 1), from the very
    first lookup on, and says so at once rather than after its timeout (8 s
    here): the kernel marked the index's liveness lock's owner dead before
    the broker was reaped, and nothing listens on its socket (issue 42 item
    4).  A Client without heartbeats (no socket monitor) as well."""
    import signal
    p = scdb.Client(own_broker.endpoint)
    p.register("base", "producer")
    toks = prompt(64)
    p.put(toks, raw_payload(p.info, 1))
    clients = [scdb.Client(own_broker.endpoint, timeout_ms=8000),
               scdb.Client(own_broker.endpoint, timeout_ms=8000, heartbeat=False)]
    for c in clients:
        c.register("base", "consumer")
        assert c.lookup(toks) == 64
    own_broker.stop(signal.SIGKILL)            # returns once it was reaped
    for c in clients:
        t0 = time.monotonic()
        with pytest.raises(scdb.ClosedError, match="gone"):
            c.lookup(toks)
        assert time.monotonic() - t0 < 2.0, "not at once: the timeout"
        with pytest.raises(scdb.ClosedError):
            c.lookup(toks)


def _interrupt_after(delay, to_main_thread):
    """SIGINT this process after delay s (to the main thread, or to the
    process, which may hand it to any thread); the time it was sent."""
    import os
    import signal
    sent = []

    def run():
        time.sleep(delay)
        sent.append(time.monotonic())
        if to_main_thread:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        else:
            os.kill(os.getpid(), signal.SIGINT)
    t = threading.Thread(target=run)
    t.start()
    return t, sent


def test_ctrl_c_during_a_call(own_broker, prompt):
    """Ctrl-C during a call that waits on a stopped broker raises
    KeyboardInterrupt at once, not after the call's timeout (8 s here), and
    the Client works afterwards (issue 25 item 8): for a call and for the
    connect in the constructor, a signal to the waiting thread or to the
    process."""
    import os
    import signal
    c = scdb.Client(own_broker.endpoint, timeout_ms=8000)
    c.register("base", "consumer")
    toks = prompt(64)
    os.kill(own_broker.proc.pid, signal.SIGSTOP)
    try:
        for to_main, call in ((True, c.ping), (False, c.stats),
                              (False, lambda: scdb.Client(own_broker.endpoint, timeout_ms=8000))):
            t, sent = _interrupt_after(0.3, to_main)
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                call()
            done = time.monotonic()
            t.join()
            assert done - sent[0] < 0.5, f"KeyboardInterrupt {done - sent[0]:.2f} s after SIGINT"
            assert done - t0 < 2.0
    finally:
        os.kill(own_broker.proc.pid, signal.SIGCONT)
    c.ping()                                   # still usable, same handle
    assert c.lookup(toks) == 0
    c.close()


def test_ctrl_c_during_arena_setup(own_broker):
    """Ctrl-C while an arena is set up -- the fetch of its memfd over the
    broker's fd socket, the one wait that did not ask Python's signal
    handlers -- raises KeyboardInterrupt at once, not after the call's
    timeout (8 s here), and the Client makes arenas afterwards (issue 42
    item 5).  The broker's fd socket is swapped for one that never answers."""
    import os
    import socket
    path = own_broker.endpoint[len("ipc://"):] + ".fd"
    c = scdb.Client(own_broker.endpoint, timeout_ms=8000)
    c.register("base", "consumer")
    os.rename(path, path + ".real")
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        silent.bind(path)
        silent.listen(8)                    # connects, never answers
        for to_main in (True, False):
            t, sent = _interrupt_after(0.3, to_main)
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                c.arena(64)
            done = time.monotonic()
            t.join()
            assert done - sent[0] < 0.5, f"KeyboardInterrupt {done - sent[0]:.2f} s after SIGINT"
            assert done - t0 < 2.0
    finally:
        silent.close()
        os.unlink(path)
        os.rename(path + ".real", path)
    with c.arena(64) as a:                   # the same Client, the real socket
        assert a.capacity == 64
    assert c.stats()["arenas"] == 0          # the interrupted ones were freed
    c.close()


# ------------------------------------------------------------ threads

def test_two_threads_one_client(broker):
    """A Client used from two threads at once raises BusyError in one of
    them instead of racing (the broker is paused so the first call blocks)."""
    import os
    import signal
    c = scdb.Client(broker.endpoint, timeout_ms=500)
    c.register("base", "consumer")
    results = [None, None]
    start = threading.Barrier(2)

    def call(i):
        start.wait()
        try:
            c.ping()
            results[i] = "ok"
        except scdb.Error as e:
            results[i] = type(e).__name__

    os.kill(broker.proc.pid, signal.SIGSTOP)
    try:
        ts = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    finally:
        os.kill(broker.proc.pid, signal.SIGCONT)
    assert sorted(results) == ["BusyError", "TimeoutError"], results
    c.timeout_ms = 5000
    assert c.timeout_ms == 5000
    c.ping()                                             # usable afterwards
    c.close()


def test_arena_collected_during_another_threads_call(own_broker):
    """An Arena collected while another thread is in a call on its Client is
    freed after that call, not during it (no second call on the handle)."""
    import os
    import signal
    c = scdb.Client(own_broker.endpoint, timeout_ms=1000)
    c.register("base", "consumer")
    a, probe = c.arena(64), c.arena(64)
    arenas = c.stats()["arenas"]
    t = threading.Thread(target=_ping, args=(c,))
    os.kill(own_broker.proc.pid, signal.SIGSTOP)
    try:
        t.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:           # until the other thread is in
            try:
                probe.n = 0
            except scdb.BusyError:
                break
        else:
            pytest.fail("the other thread never entered its call")
        del a                                        # deferred: the handle is busy
        gc.collect()
    finally:
        os.kill(own_broker.proc.pid, signal.SIGCONT)
    t.join()
    assert c.stats()["arenas"] == arenas - 1
    probe.close()
    c.close()


def _ping(c):
    try:
        c.ping()
    except scdb.Error:
        pass


def test_threads_with_own_clients(broker, producer, prompt, raw_payload):
    toks = prompt(128)
    producer.put(toks, raw_payload(producer.info, 2))
    errors = []

    def worker():
        try:
            with scdb.Client(broker.endpoint) as c:
                c.register("base", "consumer")
                with c.arena(128) as a:
                    for _ in range(20):
                        assert c.get(toks, a) == 128
                        assert c.lookup(toks) == 128
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


# ------------------------------------------------------------ leaks

def test_no_reference_leaks(producer, consumer, prompt, raw_payload):
    toks = prompt(384)
    producer.put(toks, raw_payload(producer.info, 6))
    a = consumer.arena(384)
    lst = toks.tolist()
    probs_bad = np.zeros(3, np.float64)

    def calls():
        consumer.lookup(toks)
        consumer.lookup(lst)
        a.k, a.pos, a.n
        consumer.info
        for bad in (probs_bad, [-1]):
            try:
                consumer.lookup(bad)
            except scdb.Error:
                pass

    for _ in range(200):                                 # warm caches
        calls()
    gc.collect()
    refs = [sys.getrefcount(x) for x in (toks, lst, a, consumer, probs_bad)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(10000):
        calls()
    for _ in range(200):
        consumer.get(toks, a)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert [sys.getrefcount(x) for x in (toks, lst, a, consumer, probs_bad)] == refs
    assert grown < 64 << 10, f"{grown} bytes more after 10k calls"
    a.close()
