#!/usr/bin/env bash
# test_bench_llama.sh SCDB — `scdb bench llama` at smoke size (issue 39
# items 7 and 8): one family consumer and the 1B-shape path on a tiny random
# model (--1b-dims: 2 layers, d 128; the byte vocabulary), in one run and
# one JSON file: family rows say shape "family" with their quality fields,
# 1b rows shape "1b", cost_only true, the cost fields and no quality field;
# a restore of every stored token (restored_tokens); a family prefix that is
# not whole blocks (96: 64 restored, 32 prefilled by the consumer, exact
# still the oracle); one capture_overhead, the run's final, in every family
# row; the 1b rows' own prefill and TTFT over the same repetitions; bad
# options refused by name before any work.  Behaviour only: no timing or
# speed-up is asserted.
set -u
scdb="$1"
tmp=$(mktemp -d /tmp/test_bench_llama.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

# refused by name, exit 2, before any work
refuse() {   # refuse "what the message says" -- args...
  local want="$1"; shift; shift
  "$scdb" bench llama "$@" >"$tmp/r.out" 2>"$tmp/r.err"
  local rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$want" "$tmp/r.err"; then ok "refused: $*"
  else bad "not refused as '$want' (exit $rc): $*"; cat "$tmp/r.err"; fi
}
refuse "--tokens '0'" -- --shape 1b --tokens 0
refuse "--tokens 'abc'" -- --shape 1b --tokens abc
refuse "--tokens '32768'" -- --shape 1b --tokens 32768
refuse "100 is not whole blocks of 64 tokens" -- --shape 1b --tokens 100
refuse "more than 8 values" -- --shape 1b --tokens 64,64,64,64,64,64,64,64,64
refuse "--shape 'huge': want family, 1b or all" -- --shape huge
refuse "--ranks '32,48': want 3 comma-separated values" -- --shape 1b --ranks 32,48
refuse "--prefill-reps '0'" -- --shape 1b --prefill-reps 0

"$scdb" bench llama --help >"$tmp/h.out" 2>&1
grep -q "RUN TIME" "$tmp/h.out" && grep -q -- "--shape 1b" "$tmp/h.out" \
  && ok "--help says what the 1b rows are and how long they run" || bad "--help lacks the 1b rows' run time"
grep -q "each further --prefill-reps adds about 8 minutes" "$tmp/h.out" && grep -q "prefilled_after_restore" "$tmp/h.out" \
  && ok "--help says what --prefill-reps costs and names prefilled_after_restore" || bad "--help: --prefill-reps cost"

"$scdb" bench llama --shape all --consumers code --windows 1 --reps 2 --prefix 96 --cont 4 \
  --1b-dims 2,128,4,2,256 --tokens 64,128 --prefill-reps 2 --vocab bytes --json "$tmp/l.json" \
  >"$tmp/l.out" 2>"$tmp/l.err"
rc=$?
[ $rc -eq 0 ] && ok "a smoke run of both shapes exits 0" || { bad "a smoke run exits $rc"; tail -20 "$tmp/l.err"; }
if /usr/bin/python3 - "$tmp/l.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
fam = [r for r in d["rows"] if r.get("shape") == "family"]
big = [r for r in d["rows"] if r.get("shape") == "1b"]
assert len(fam) == 1 and fam[0]["consumer"] == "code", fam
assert len(big) == 2 and [r["prefix_tokens"] for r in big] == [64, 128], big
assert len(d["rows"]) == 3, "a row without a shape"
for k in ("kl", "top1", "exact_kl", "raw_kl", "ttft_ms", "speedup"):
    assert k in fam[0], k
assert "cost_only" not in fam[0]
# 96 tokens: one stored block restored, the other 32 the consumer's own
assert fam[0]["prefix_tokens"] == 96 and fam[0]["restored_tokens"] == 64, fam[0]
assert fam[0]["prefilled_after_restore"] == 32, fam[0]
assert fam[0]["exact_top1"] == 1.0 and fam[0]["exact_kl"] < 1e-3, fam[0]
# the run's capture overhead, not a running one
assert fam[0]["capture_overhead"] == d["capture_overhead"], (fam[0]["capture_overhead"], d["capture_overhead"])
for r in big:
    assert r["cost_only"] is True, r
    for k in ("consumer", "kind", "engine", "prefix_tokens", "restore_ms", "own_prefill_ms", "ttft_ms",
              "speedup", "capture_overhead", "capture_ms", "put_ms", "get_ms", "blob_ms"):
        assert k in r, (k, r)
    for k in ("ppl_ratio", "kl", "top1", "raw_ppl_ratio", "raw_kl", "raw_top1", "exact_kl", "exact_top1"):
        assert k not in r, ("a quality field in a cost-only row", k)
    assert r["restored_tokens"] == r["prefix_tokens"], r
    assert r["n_layers"] == 2 and r["d_model"] == 128 and r["vocab_size"] == 256, r
    for k in ("restore_ms", "own_prefill_ms", "ttft_ms", "capture_ms", "get_ms", "blob_ms"):
        assert math.isfinite(r[k]) and r[k] > 0, (k, r)
    assert r["code_bytes_per_token"] < r["raw_kv_bytes_per_token"], r
    assert r["prefill_reps"] == 2 and r["restore_reps"] == 2, r   # own and TTFT: the same repetitions
PY
then ok "JSON: family and 1b rows in one file, 1b rows cost only with the cost fields"
else bad "JSON rows"; fi
grep -q "^1B shape (cost only" "$tmp/l.out" && ok "the 1b table says cost only" || bad "the 1b table does not say cost only"

# --own-layer: a pair of layer-local decoders, said so in the row
"$scdb" bench llama --shape 1b --own-layer --patch-layers 0 --reps 1 \
  --1b-dims 2,128,4,2,256 --tokens 64 --vocab bytes --json "$tmp/o.json" >"$tmp/o.out" 2>"$tmp/o.err"
rc=$?
if [ $rc -eq 0 ] && /usr/bin/python3 - "$tmp/o.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rows"]
assert len(r) == 1 and r[0]["decoders"] == "own-layer" and r[0]["n_patch"] == 0, r
assert r[0]["restored_tokens"] == 64, r
PY
then ok "--own-layer --patch-layers 0: one row of a layer-local pair, every token restored"
else bad "--own-layer run (exit $rc)"; tail -5 "$tmp/o.err"; fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
