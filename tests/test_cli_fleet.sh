#!/usr/bin/env bash
# test_cli_fleet.sh SCDB — the fleet through the scdb command (issue 23): the
# fan-out demo end to end, a fleet calibrated in one run, and a tiny
# `scdb bench fleet`.  Apart from test_cli.sh so that each has its own time
# limit and ctest -j2 runs them side by side (the ASan build is slow).
set -u
scdb="$1"
. "$(dirname "$0")/helpers/cli_expect.sh"

data="${SCDB_DATA:-$(dirname "$scdb")/../share/scdb}"
cb="$data/codebooks/base.safetensors"

# the fan-out demo end to end (issue 23): a broker serving the whole fleet,
# one prefix stored once by the producer, every specialist and every adapter
# with a pair a consumer of it
mkdir -p "$tmp/demo-tmp"
TMPDIR="$tmp/demo-tmp" "$scdb" demo --device cpu >"$tmp/demo" 2>"$tmp/err"
code=$?
grep -q "scdb demo: device cpu (cpu requested" "$tmp/err" && ok "demo --device cpu says which device" \
  || bad "demo --device cpu says which device"
if [ $code -eq 0 ] && grep -q "^demo: ok" "$tmp/demo" && grep -q "^| code | full |" "$tmp/demo" \
   && grep -q "^| manpages | full |" "$tmp/demo"; then ok "demo runs end to end for every specialist"
else bad "demo (exit $code)"; cat "$tmp/demo" "$tmp/err"; fi
[ -z "$(ls -A "$tmp/demo-tmp")" ] && ok "demo cleaned up" || bad "demo left its temp dir"
expect 2 "demo: bad --prefix" -- "$scdb" demo --prefix 100
expect 2 "demo: bad --budget" -- "$scdb" demo --budget 0
expect 2 "demo: bad --codes" -- "$scdb" demo --codes f8
grep -Eq "^\| code \|.*\([1-9][0-9]* evictions" "$tmp/demo" && ok "demo consumers decode through a live session that evicts" \
  || bad "demo shows no live-session evictions"
# every adapter with a pair is a consumer (kind lora), every other one is
# named as skipped; one prefix stored once; the fleet totals
if python3 - "$tmp/demo" "$data" <<'PY'
import os, re, sys
lines = open(sys.argv[1]).read().splitlines()
data = sys.argv[2]
src = [l for l in lines if l.startswith("shared prefix: ")]
assert len(src) == 1 and " of heldout/english.txt from byte " in src[0], src   # no machine's path
rows = {l.split("|")[1].strip(): l.split("|")[2].strip() for l in lines
        if re.match(r"^\| [a-z0-9-]+ \| (lora|full) \|", l)}
ads = sorted(d for d in os.listdir(os.path.join(data, "adapters")) if os.path.isdir(os.path.join(data, "adapters", d)))
paired = [a for a in ads if os.path.exists(os.path.join(data, "pairs", "base__%s.safetensors" % a))]
assert paired, "no adapter has a pair"
assert all(rows.get(a) == "lora" for a in paired), (paired, rows)
assert all(rows.get(m) == "full" for m in ("code", "manpages", "python")), rows
skipped = [l for l in lines if l.startswith("skipped, no pair")]
unpaired = [a for a in ads if a not in paired]
if unpaired:
    assert len(skipped) == 1 and skipped[0].split(":")[1].split() == unpaired, (skipped, unpaired)
else:
    assert not skipped, skipped
assert sum(l.startswith("producer base: prefilled ") for l in lines) == 1, "one prefix, stored once"
tot = [l for l in lines if l.startswith("fleet: %d consumers served (%d LoRA adapters" % (len(rows), len(paired)))]
assert len(tot) == 1 and "stored once" in tot[0] and "per-adapter keying" in tot[0], tot
PY
then ok "demo: the whole fleet with a pair served from one stored prefix, the rest named skipped"
else bad "demo: the whole fleet with a pair served from one stored prefix, the rest named skipped"; cat "$tmp/demo"; fi

# issue 23 items 4 and 6: a fleet calibrated in one run (the producer's
# states once), pairs equal to one-at-a-time runs; scdb bench fleet, tiny
fl="--codebook $cb --texts $data/heldout/english.txt --windows 3 --steps 4 --eval-windows 1"
expect 0 "calibrate --codebook: two consumers in one run" -- "$scdb" calibrate $fl \
  --consumer "$data/models/python" --consumer "$data/models/code" -o "$tmp/fleet2"
grep -q "producer states over 3 windows computed once (3 producer passes) for 2 consumers" "$tmp/out" \
  && ok "calibrate: the producer's states computed once for the fleet" || { bad "calibrate: producer once"; cat "$tmp/out"; }
[ "$(grep -c '^  consumer [a-z]*: [0-9.]* s' "$tmp/out")" -eq 2 ] && ok "calibrate: seconds per consumer" \
  || { bad "calibrate: seconds per consumer"; cat "$tmp/out"; }
grep -q "consumer 2/2 'code'" "$tmp/err" && ok "calibrate: progress per consumer" || bad "calibrate: progress per consumer"
expect 0 "calibrate --codebook: the second consumer alone" -- "$scdb" calibrate $fl \
  --consumer "$data/models/code" -o "$tmp/fleet1"
cmp -s "$tmp/fleet1/pairs/base__code.safetensors" "$tmp/fleet2/pairs/base__code.safetensors" \
  && ok "calibrate: a fleet run's pair is the one-at-a-time pair, byte for byte" \
  || bad "calibrate: fleet pair differs from the one-at-a-time pair"
# token-input decoders (issue 23): the default where decoders are fitted on
# samples; --no-token-input turns them off, --no-token-corr is lora-only
expect 0 "calibrate --codebook --no-token-input" -- "$scdb" calibrate $fl --no-token-input \
  --consumer "$data/models/python" -o "$tmp/notok"
grep -q "^pair base -> python: .*late-added;" "$tmp/out" && ! grep -q "token input" "$tmp/out" \
  && ok "calibrate --no-token-input: the pair has no token input" || { bad "calibrate --no-token-input"; cat "$tmp/out"; }
expect 0 "calibrate --codebook: token input by default" -- "$scdb" calibrate $fl \
  --consumer "$data/models/python" -o "$tmp/tok"
grep -q "^pair base -> python: .*late-added, token input;" "$tmp/out" \
  && ok "calibrate: token input by default" || { bad "calibrate: token input by default"; cat "$tmp/out"; }
if /usr/bin/python3 - "$tmp/tok/pairs/base__python.safetensors" "$tmp/notok/pairs/base__python.safetensors" <<'PY'
import json, struct, sys
def head(p):
    b = open(p, "rb").read()
    return json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
t, n = head(sys.argv[1]), head(sys.argv[2])
assert t["__metadata__"]["token_input"] == "1" and "token_input" not in n["__metadata__"]
assert t["layers.1.dec_k_tok"]["shape"] == [64, 128] and "layers.1.dec_k_tok" not in n
assert len(t) == len(n) + 14, (len(t), len(n))   # K and V of 7 coded layers
PY
then ok "calibrate: token-input tensors in the file, none without"; else bad "calibrate: token-input tensors"; fi
expect 2 "calibrate: --no-token-corr without --lora-pairs" -- "$scdb" calibrate $fl --no-token-corr \
  --consumer "$data/models/python" -o "$tmp/no"
expect 2 "calibrate: a codebook fit takes at most 8 consumers" -- "$scdb" calibrate --producer "$data/models/base" \
  $(for i in 1 2 3 4 5 6 7 8 9; do printf -- '--consumer %s ' "$data/models/code"; done) --ranks 8,8,8 \
  --patch-layers 1 -o "$tmp/no"
# an adapter added to the shipped fleet (issue 23 item 4): fitted against the
# shipped shared part without refitting it, on its own domain and a sample of
# the fleet's, the seconds per added adapter printed; the pair loads and
# decodes with the shipped shared part
if [ -f "$data/pairs/base__fleet.safetensors" ] && [ -d "$data/adapters/perl" ]; then
  ad="--codebook $cb --lora-pairs --shared $data/pairs/base__fleet.safetensors --consumer $data/adapters/perl"
  expect 0 "calibrate --shared: one added adapter" -- "$scdb" calibrate $ad --own-windows 2 --fleet-windows 1 \
    --eval-windows 1 -o "$tmp/added"
  grep -q "own domain 'perl': 2 windows" "$tmp/err" && grep -Eq "a sample of the fleet: [1-9][0-9]* windows from" "$tmp/err" \
    && ok "calibrate --shared: its own domain's windows and a sample of the fleet's" \
    || { bad "calibrate --shared: statistics windows"; cat "$tmp/err"; }
  grep -Eq "^added 1 adapter to the fleet of shared part [0-9a-f]{32}: [0-9.]+ s, cpu [0-9.]+ s in all .*: [0-9.]+ s, cpu [0-9.]+ s per added adapter" "$tmp/out" \
    && grep -Eq '^  consumer perl: [0-9.]+ s \(cpu [0-9.]+ s: the statistics windows' "$tmp/out" \
    && ok "calibrate --shared: seconds per added adapter, wall and cpu" \
    || { bad "calibrate --shared: seconds per added adapter"; cat "$tmp/out"; }
  # not refitted: the same file, copied beside the new pair that refers to it
  cmp -s "$tmp/added/pairs/base__fleet.safetensors" "$data/pairs/base__fleet.safetensors" \
    && ok "calibrate --shared: the shared part copied beside the pair, not refitted" \
    || bad "calibrate --shared: no copy of the shared part beside the pair, or another one"
  # an output dir holding ANOTHER shared part: refused, nothing written
  mkdir -p "$tmp/other/pairs" && cp "$data/pairs/base__fleet.safetensors" "$tmp/other/pairs/"
  printf 'x' | dd of="$tmp/other/pairs/base__fleet.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
  expect 1 "calibrate --shared: another shared part in the output dir is refused" -- "$scdb" calibrate $ad \
    --own-windows 2 --fleet-windows 1 --eval-windows 1 -o "$tmp/other"
  grep -q "in the way of --shared's copy\|is another shared part" "$tmp/err" \
    && ok "calibrate --shared: says the shared part in the output dir is in the way" \
    || { bad "calibrate --shared: other shared part message"; cat "$tmp/err"; }
  [ ! -e "$tmp/other/pairs/base__perl.safetensors" ] && ok "calibrate --shared: no pair written beside another shared part" \
    || bad "calibrate --shared wrote a pair beside another shared part"
  expect 0 "bench fleet: the added adapter's pair with the shipped shared part" -- "$scdb" bench fleet --data "$data" \
    --pairs "$tmp/added/pairs" --consumers perl --prefix 32 --cont 8 --windows 1 --reps 1
  grep -q "^| perl | lora |" "$tmp/out" && ok "bench fleet: the added adapter decodes" \
    || { bad "bench fleet: the added adapter's row"; cat "$tmp/out"; }
fi
expect 2 "calibrate: --own-windows without --shared" -- "$scdb" calibrate --codebook "$cb" --lora-pairs \
  --consumer "$data/adapters/perl" --own-windows 3 -o "$tmp/no"
expect 2 "calibrate: bad --sample-stride" -- "$scdb" calibrate --codebook "$cb" --lora-pairs \
  --consumer "$data/adapters/perl" --sample-stride 0 -o "$tmp/no"

bf="--data $data --prefix 32 --cont 8 --windows 1 --reps 1"
expect 0 "bench fleet: tiny" -- "$scdb" bench fleet $bf --consumers base,code --json "$tmp/fleet.json"
if /usr/bin/python3 - "$tmp/fleet.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
keys = {"consumer", "kind", "text", "bytes_per_token", "raw_bytes_per_token", "ppl_ratio", "kl", "top1",
        "raw_ppl_ratio", "raw_kl", "raw_top1", "ttft_ms", "own_prefill_ms", "pair_bytes", "calib_s"}
rows = j["rows"]
assert j["consumers"] == 2 and len(rows) == 2, j
assert all(keys <= set(r) for r in rows), rows
assert {r["consumer"] for r in rows} == {"base", "code"}
assert all(r["kind"] == "full" and r["pair_bytes"] > 0 and r["tokens"] > 0 for r in rows)
assert j["stored_bytes"] > 0 and j["stored_bytes_per_adapter_keying"] > j["stored_bytes"]
# through a real broker: its registration phase (issue 23 item 5), and TTFT
# that includes the get
assert j["registered_consumers"] == 2 and j["clients_kept"] == 2, j
assert len(j["reload_ms"]) == 2 and len(j["rss_kb"]) == 2 and j["broker_rss0_kb"] > 0, j
assert all(k in j for k in ("rss_per_pair_kb", "rss_per_pair_kb_fresh", "register_ms", "client_register_ms"))
assert "get from the broker" in j["ttft_includes"] and all(r["decode_ms"] > 0 for r in rows), j["ttft_includes"]
PY
then ok "bench fleet: JSON rows and totals"; else bad "bench fleet: JSON rows and totals"; fi
expect 0 "bench fleet: --text for every consumer" -- "$scdb" bench fleet $bf --consumers base,code \
  --text "$data/heldout/python.txt"
[ "$(grep -c 'python.txt' "$tmp/out")" -eq 2 ] && ok "bench fleet: both consumers on the --text" \
  || { bad "bench fleet: --text rows"; cat "$tmp/out"; }
mkdir -p "$tmp/badpairs" && head -c 1000 "$data/pairs/base__code.safetensors" >"$tmp/badpairs/base__code.safetensors"
expect 1 "bench fleet: a broken pair fails the run" -- "$scdb" bench fleet $bf --consumers code --pairs "$tmp/badpairs"
mkdir -p "$tmp/nopairs"
expect 1 "bench fleet: no consumer with a pair" -- "$scdb" bench fleet $bf --pairs "$tmp/nopairs"
grep -q "no consumer with a pair" "$tmp/err" && ok "bench fleet: says no consumer" || bad "bench fleet: no-consumer message"

cli_expect_done
