"""A replace says what it did (issue 25 item 2): n_new counts the blocks it
added, n_replaced the stored ones it overwrote (it answered n_new for
blocks that existed)."""


def test_replace_counts(producer, consumer, prompt, raw_payload):
    toks = prompt(4 * 64)
    pay = raw_payload(producer.info, 4)
    r = producer.put(toks[:128], pay[:2])
    assert (r["n_new"], r["n_replaced"]) == (2, 0)
    r = producer.put(toks, pay[:2], replace=True)                 # two stored: overwritten
    assert (r["n_new"], r["n_replaced"]) == (0, 2)
    r = producer.put(toks, pay[1:4], first_block=1, replace=True)  # one stored, two new
    assert (r["n_new"], r["n_replaced"]) == (2, 1)
    r = producer.put(toks, pay)                                   # all stored: skipped
    assert (r["n_new"], r["n_replaced"]) == (0, 0)
    assert consumer.lookup(toks) == 256
