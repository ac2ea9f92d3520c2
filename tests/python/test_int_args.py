"""Integer arguments of the module (issue 25 items 3 and 11): a value that
does not fit its C parameter is refused with its real value and the real
limit in the message, never wrapped modulo 2**32 into another block."""
import numpy as np
import pytest

import scdb

U32 = 2**32


def test_put_first_block_out_of_range_is_refused(producer, consumer, prompt, raw_payload):
    toks = prompt(4 * 64)
    pay = raw_payload(producer.info, 4)
    assert producer.put(toks, pay[:2])["n_new"] == 2              # blocks 0, 1
    # 2**32 + 2 used to write block 2 (the index wrapped)
    with pytest.raises(OverflowError) as e:
        producer.put(toks, pay[2:3], first_block=U32 + 2)
    assert str(U32 + 2) in str(e.value) and str(U32 - 1) in str(e.value)
    assert consumer.lookup(toks) == 128                          # block 2 not written
    # -1 used to say "block 4294967295"
    with pytest.raises(OverflowError) as e:
        producer.put(toks, pay[2:3], first_block=-1)
    assert "-1" in str(e.value) and "4294967295" not in str(e.value).split("..")[0]
    with pytest.raises(TypeError):
        producer.put(toks, pay[2:3], first_block=2.0)
    assert producer.put(toks, pay[2:3], first_block=2)["n_new"] == 1
    assert consumer.lookup(toks) == 192


def test_delete_from_block_out_of_range_is_refused(producer, consumer, prompt, raw_payload):
    toks = prompt(2 * 64)
    producer.put(toks, raw_payload(producer.info, 2))
    for bad in (-1, U32, U32 + 1, 2**70):
        with pytest.raises(OverflowError) as e:
            producer.delete(toks, from_block=bad)                # used to return 0 (-1: "all")
        assert str(bad) in str(e.value)
    assert consumer.lookup(toks) == 128                          # nothing deleted
    assert producer.delete(toks, from_block=1) == 1
    assert consumer.lookup(toks) == 64


def test_session_budgets_out_of_range_are_refused(producer, consumer, prompt, raw_payload):
    toks = prompt(128)
    producer.put(toks, raw_payload(producer.info, 2))
    with consumer.arena(160) as a:
        consumer.get(toks, a)
        for kw in ({"budget": -1}, {"budget": U32 + 64}, {"budget": 64, "cadence": -1},
                   {"budget": 64, "cadence": U32 + 4}):
            with pytest.raises(OverflowError) as e:
                a.session(policy="streaming", n_heads=4, **kw)
            assert str(list(kw.values())[-1]) in str(e.value)
        with a.session(100, "streaming", 0, n_heads=4) as s:
            s.add_stats()
            for bad in (-1, U32 + 64):
                with pytest.raises(OverflowError) as e:
                    s.evict(budget=bad)                          # -1 used to mean 4294967295
                assert str(bad) in str(e.value)
            assert a.n == 128                                    # nothing evicted


def test_timeout_ms_message_states_value_and_limit(broker):
    for bad in (2**40, 2**31, 0, -5):
        with pytest.raises(scdb.InvalidError) as e:
            scdb.Client(broker.endpoint, timeout_ms=bad)
        assert str(bad) in e.value.message and "2147483647" in e.value.message
        assert "must be > 0" not in e.value.message
    with scdb.Client(broker.endpoint, timeout_ms=1000) as c:
        with pytest.raises(scdb.InvalidError) as e:
            c.timeout_ms = 2**40                                 # said "must be > 0, got 2**40"
        assert "1099511627776" in e.value.message and "2147483647" in e.value.message
        assert "must be > 0" not in e.value.message
        assert c.timeout_ms == 1000
        c.timeout_ms = 2**31 - 1
        assert c.timeout_ms == 2**31 - 1


def test_token_message_states_the_token(consumer):
    with pytest.raises(scdb.RangeError) as e:
        consumer.lookup([1, 2, 2**70])                           # said "token 2 is 2147483648"
    assert "token 2 is 1180591620717411303424" in e.value.message
    with pytest.raises(scdb.RangeError) as e:
        consumer.lookup([1, -2**70])
    assert "token 1 is -1180591620717411303424" in e.value.message
    with pytest.raises(scdb.RangeError) as e:
        consumer.lookup(np.array([1, 2**31], dtype=np.int64))
    assert "token 1 is 2147483648" in e.value.message


def test_put_states_first_block_out_of_range_is_refused(broker, prompt):
    with scdb.Client(broker.endpoint) as c:
        c.register("base", "producer", "base-scd")
        with c.states_arena(64) as sa:
            toks = prompt(64)
            for bad in (-1, U32 + 1):
                with pytest.raises(OverflowError) as e:
                    c.put_states(toks, sa, first_block=bad)
                assert str(bad) in str(e.value) and "first_block" in str(e.value)
