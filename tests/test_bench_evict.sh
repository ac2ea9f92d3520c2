#!/usr/bin/env bash
# test_bench_evict.sh SCDB — `scdb bench evict` at smoke size (one model,
# a seen and an unseen suite domain, one short window): it reports every
# default budget (50%, 25%, 12.5%, 6.25%) with seen and unseen domains
# apart, the previous shipped policy beside the current one, per-row
# budget / seen / split fields and a summary per (policy, budget, split);
# a run that measures nothing exits non-zero; the files it read are named
# relative to the data directory, however they were given (issue 42).
# Behaviour only: no KL or timing is asserted.
set -u
scdb="$1"
tmp=$(mktemp -d /tmp/test_bench_evict.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok()  { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }
smoke=(--models base --domains prose,changelog --windows 1 --prefill 48 --steps 16 --every 4)

"$scdb" bench evict "${smoke[@]}" --json "$tmp/e.json" >"$tmp/e.out" 2>"$tmp/e.err"
rc=$?
[ $rc -eq 0 ] && ok "a smoke run exits 0" || { bad "a smoke run exits $rc"; tail -20 "$tmp/e.err"; }
grep -q "^## Seen domains" "$tmp/e.out" && grep -q "^## Unseen domains" "$tmp/e.out" \
  && ok "seen and unseen domains in tables apart" || bad "no separate seen / unseen tables"
grep -q "^## Summary" "$tmp/e.out" && ok "a summary table" || bad "no summary table"
grep -q '^Learned policy `distillcache`: policies/distillcache_base.safetensors (' "$tmp/e.out" \
  && grep -q '^Texts: the domain suite evict_suite/manifest.json ' "$tmp/e.out" \
  && ok "the report names the policy and the suite relative to the data directory" \
  || { bad "the report names the policy or the suite otherwise"; grep -E '^(Learned|Texts)' "$tmp/e.out"; }
if /usr/bin/python3 - "$tmp/e.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
rows, summ = d["rows"], d["summary"]
budgets = [0.5, 0.25, 0.125, 0.0625]
labels = {l["label"] for l in d["learned_policies"]}
assert labels == {"distillcache", "previous"}, labels
# files named relative to the data directory, never a path of this machine
assert d["suite"] == "evict_suite/manifest.json", d["suite"]
assert d["policy_file"] == "policies/distillcache_base.safetensors", d["policy_file"]
for l in d["learned_policies"]:
    assert l["file"].startswith("policies/"), l
assert all(r["policy_file"].startswith("policies/") for r in rows if "policy_file" in r)
for r in rows:
    for k in ("model", "domain", "seen", "split", "policy", "label", "budget", "kl", "top1",
              "ppl", "us_per_token", "model_us_per_token", "budget_tokens"):
        assert k in r, (k, r)
got = {(r["label"], r["budget"], r["split"]) for r in rows}
for lab in labels | {"streaming", "h2o", "snapkv", "tova"}:
    for b in budgets:
        for sp in ("seen", "unseen"):
            assert (lab, b, sp) in got, (lab, b, sp)
cells = {(s["label"], s["budget"], s["split"]): s for s in summ}
for lab in labels:
    for b in budgets:
        for sp in ("seen", "unseen"):
            s = cells[(lab, b, sp)]
            assert s["pairs"] == 1 and s["seen"] == (sp == "seen"), s
            for k in ("kl_ratio_geomean", "overhead_mean", "overhead_worst"):
                assert math.isfinite(s[k]) and s[k] >= 0, (k, s)
            assert 0 <= s["kl_lowest"] <= 1 and 0 <= s["top1_at_least_best"] <= 1, s
            other = ({"distillcache", "previous"} - {lab}).pop()
            assert s["kl_at_most"][other] in (0, 1), s
            # the summary agrees with the rows it summarises
            kl = next(r["kl"] for r in rows if (r["label"], r["budget"], r["split"]) == (lab, b, sp))
            best = min(r["kl"] for r in rows if r["budget"] == b and r["split"] == sp
                       and r["label"] in ("streaming", "h2o", "snapkv", "tova"))
            want = max(kl, 1e-12) / max(best, 1e-12)
            assert abs(s["kl_ratio_geomean"] - want) <= 1e-6 * max(1.0, want), (s, want)
            assert s["kl_lowest"] == (1 if kl < best else 0), (s, kl, best)
            # against the per-head heuristics too (the originals' keep sets)
            best_all = min(r["kl"] for r in rows if r["budget"] == b and r["split"] == sp
                           and r["label"] in ("streaming", "h2o", "snapkv", "tova", "h2o_head",
                                              "snapkv_head", "tova_layer"))
            want = max(kl, 1e-12) / max(best_all, 1e-12)
            assert abs(s["kl_ratio_geomean_with_per_head"] - want) <= 1e-6 * max(1.0, want), (s, want)
            assert s["kl_lowest_with_per_head"] == (1 if kl < best_all else 0), s
for lab in ("h2o_head", "snapkv_head", "tova_layer"):
    for b in budgets:
        assert (lab, b, "seen") in got and (lab, b, "unseen") in got, (lab, b)
PY
then ok "JSON: 4 budgets x seen/unseen rows, current and previous policy, the per-head heuristics, a consistent summary"
else bad "JSON rows / summary incomplete or inconsistent"
fi

"$scdb" bench evict --models base --domains changelog --portion val --windows 1 --prefill 48 \
  --steps 16 >"$tmp/z.out" 2>"$tmp/z.err"
rc=$?
[ $rc -ne 0 ] && ok "a run that measures no text exits $rc" || bad "a run with no rows exits 0"
grep -q "no rows" "$tmp/z.err" && ok "it says so" || { bad "no message about no rows"; cat "$tmp/z.err"; }

# --no-per-head leaves the per-head heuristics out (the summary still counts the four)
"$scdb" bench evict "${smoke[@]}" --no-per-head --budgets 0.125 --json "$tmp/n.json" >"$tmp/n.out" 2>"$tmp/n.err" \
  && /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
labs = {r["label"] for r in d["rows"]}
assert not labs & {"h2o_head", "snapkv_head", "tova_layer"}, labs
assert {"streaming", "h2o", "snapkv", "tova", "distillcache"} <= labs, labs' "$tmp/n.json" \
  && ok "--no-per-head: no per-head rows, the four and the learned ones" || bad "--no-per-head"

# a policy named by its path in the source tree (where the build tree's
# data directory links to) is still named relative to the data directory
src=$(readlink -f "$(dirname "$scdb")/../share/scdb/policies/distillcache_base.safetensors")
"$scdb" bench evict "${smoke[@]}" --no-per-head --budgets 0.125 --policy "$src" --json "$tmp/p.json" \
  >"$tmp/p.out" 2>"$tmp/p.err" \
  && /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["policy_file"] == "policies/distillcache_base.safetensors", d["policy_file"]
assert not open(sys.argv[2]).read().count(sys.argv[3]), "the report names " + sys.argv[3]' \
  "$tmp/p.json" "$tmp/p.out" "$src" \
  && ok "--policy $src: named policies/distillcache_base.safetensors" \
  || { bad "--policy $src: named by an absolute path"; grep -E '^Learned' "$tmp/p.out"; tail -3 "$tmp/p.err"; }

# comma lists with an empty field or too many entries are usage errors
# naming the option (strtok_r folded "base," into "base" and a bad
# --domains list into every domain)
for a in "--models base," "--domains ,prose" "--domains prose,,changelog" "--budgets 0.5,,0.25" \
         "--budgets 0.5,0.4,0.3,0.2,0.1,0.05,0.01"; do
  "$scdb" bench evict $a --windows 1 >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  opt=${a%% *}
  [ $rc -eq 2 ] && grep -q -- "$opt '.*': 1 to [0-9]* .*no empty field" "$tmp/bad.err" \
    && ok "bench evict $a: a usage error naming $opt" \
    || { bad "bench evict $a: exit $rc, want 2 with a message naming $opt"; head -3 "$tmp/bad.err"; }
done
# --engine llama.cpp at smoke size (a build with llama.cpp; without it the
# bench says so and exits 2): every policy evicts in llama.cpp, learned_sets
# keeps sets per head (25% is below the shipped file's split), and the
# summary agrees with the rows it counts
"$scdb" bench evict --engine llama.cpp --models base --domains prose,c-header --budgets 0.25 \
  --prefill 64 --steps 32 --every 8 --threads 1 --json "$tmp/l.json" >"$tmp/l.out" 2>"$tmp/l.err"
rc=$?
skip_llama=
if [ $rc -eq 2 ] && grep -q "this build has no llama.cpp" "$tmp/l.err"; then
  echo "skip: bench evict --engine llama.cpp (this build has no llama.cpp)"
  skip_llama=1
elif [ $rc -ne 0 ]; then
  bad "bench evict --engine llama.cpp: exit $rc"; tail -5 "$tmp/l.err"
elif /usr/bin/python3 - "$tmp/l.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
rows, summ = d["rows"], d["summary"]
assert d["capture_every"] == 2, d["capture_every"]     # the evictor's default
pols = {"streaming", "h2o", "snapkv", "tova", "learned", "learned_sets", "ctx_shift"}
got = {(r["domain"], r["policy"]) for r in rows}
assert got == {(dm, p) for dm in ("prose", "c-header") for p in pols}, got
for r in rows:
    assert r["steps"] == 32 and (r["policy"] == "ctx_shift" or r["evictions"] >= 1), r
    assert math.isfinite(r["kl"]) and r["kl"] >= 0 and 0 <= r["top1"] <= 1, r
    # every share over the twin's step; the sets path really ran below the split
    assert r["plain_decode_ms"] > 0 and r["decode_ms"] > 0, r
    assert abs(r["total_share"] - r["cost_share"] - r["capture_share"]) < 1e-12, r
    assert abs(r["cost_share"] - r["stats_share"] - r["evict_share"]) < 1e-12, r
    assert (r["sets_evictions"] >= 1) == (r["policy"] == "learned_sets"), r
    # one step in two read every layer, the other only the mask
    if r["policy"] != "ctx_shift":
        assert r["full_reads"] == 16 and r["mask_reads"] == 16, r
    # the learned variants replayed by the reference engine, every step
    if r["policy"].startswith("learned"):
        # (llama.cpp's F16 KV against the reference's F32: ~1e-2 at most;
        # a wrong gather of the kept sets moves logits by far more)
        assert r["ref_steps"] == 32 and r["ref_same_top1"] >= 0.9, r
        assert 0 <= r["ref_max_dlogit"] < 0.05, r
    else:
        assert "ref_steps" not in r, r
assert {(s["policy"], s["split"]) for s in summ} == {(p, sp) for p in ("learned", "learned_sets")
                                                     for sp in ("seen", "unseen")}, summ
for s in summ:
    mine = [r for r in rows if r["policy"] == s["policy"] and r["seen"] == (s["split"] == "seen")]
    assert s["pairs"] == len(mine) == 1, s
    r = mine[0]
    others = [x for x in rows if x["domain"] == r["domain"] and not x["policy"].startswith("learned")]
    best = min(x["kl"] for x in others)
    assert s["kl_lowest"] == (1 if r["kl"] < best else 0), (s, r["kl"], best)
    assert abs(s["kl_ratio_geomean"] - r["kl"] / best) <= 1e-9 * max(1, r["kl"] / best), s
    assert abs(s["learned_cost_worst"] - r["total_share"]) < 1e-12, s
    assert abs(s["learned_cost_median"] - r["total_share"]) < 1e-12, s
    assert s["ref_same_top1_worst"] == r["ref_same_top1"], s
    assert s["ref_max_dlogit"] == r["ref_max_dlogit"], s
    assert s["ref_differ"] == r["ref_differ"], s
    assert s["ref_differ_beyond_tie"] == r["ref_differ"] - r["ref_differ_near_tie"], s
PY
then ok "bench evict --engine llama.cpp: every policy evicts in llama.cpp, learned_sets too, a consistent summary"
else bad "bench evict --engine llama.cpp: JSON rows / summary"; fi

# --gguf DIR: the reference engine replays DATA/models/NAME, so a NAME.gguf
# that is another model's export is refused by fingerprint before anything
# runs (it would differ by whole logits); base's own f32 export runs
if [ -z "$skip_llama" ]; then
  models=$(dirname "$scdb")/../share/scdb/models
  mkdir -p "$tmp/gw" "$tmp/gr"
  "$scdb" export-gguf "$models/code" -o "$tmp/gw/base.gguf" >/dev/null 2>&1 \
    && "$scdb" export-gguf "$models/base" -o "$tmp/gr/base.gguf" >/dev/null 2>&1 \
    || bad "export-gguf of base and code for --gguf"
  g=(--engine llama.cpp --models base --domains prose --budgets 0.25 --prefill 64 --steps 32
     --every 8 --threads 1)
  "$scdb" bench evict "${g[@]}" --gguf "$tmp/gw" --json "$tmp/gw/x.json" >"$tmp/gw.out" 2>"$tmp/gw.err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "base.gguf is not .*models/base's export" "$tmp/gw.err" \
    && [ ! -e "$tmp/gw/x.json" ] \
    && ok "bench evict --gguf with another model's export as base.gguf: refused by fingerprint" \
    || { bad "bench evict --gguf, code's export as base.gguf: exit $rc"; tail -3 "$tmp/gw.err"; }
  # (and the attention read at every step: the JSON says so)
  "$scdb" bench evict "${g[@]}" --capture-every 1 --gguf "$tmp/gr" --json "$tmp/gr/x.json" \
      >"$tmp/gr.out" 2>"$tmp/gr.err" \
    && /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["capture_every"] == 1 and d["rows"]; assert all(r["mask_reads"] == 0 and r["full_reads"] == 32 for r in d["rows"] if r["policy"] != "ctx_shift")' "$tmp/gr/x.json" \
    && ok "bench evict --gguf with base's own export, --capture-every 1: runs" \
    || { bad "bench evict --gguf with base's own export: exit $?"; tail -3 "$tmp/gr.err"; }
  "$scdb" bench evict --engine llama.cpp --steps 8 --capture-every 16 >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--capture-every 16 is over --steps 8" "$tmp/bad.err" \
    && ok "bench evict --capture-every over --steps: refused" \
    || { bad "bench evict --capture-every 16 --steps 8: exit $rc"; head -3 "$tmp/bad.err"; }
  for a in "--capture-every 0" "--capture-every 65" "--capture-every x"; do
    "$scdb" bench evict --engine llama.cpp $a >"$tmp/bad.out" 2>"$tmp/bad.err"
    rc=$?
    [ $rc -eq 2 ] && grep -q -- "--capture-every '" "$tmp/bad.err" \
      && ok "bench evict --engine llama.cpp $a: a usage error naming --capture-every" \
      || { bad "bench evict --engine llama.cpp $a: exit $rc, want 2 naming --capture-every"; head -3 "$tmp/bad.err"; }
  done
fi

# --shape 1b (cost only) at a tiny --1b-dims: a random-weight GGUF written,
# h2o / learned / learned_sets evict in it, rows say cost_only and carry
# every share over the twin's step, no quality field; bad shapes, lists
# with an empty field and suite options are usage errors naming the option
if [ -z "$skip_llama" ]; then
  "$scdb" bench evict --engine llama.cpp --shape 1b --1b-dims 2,128,4,2,256 --prefill 64 \
    --steps 16 --every 8 --budgets 0.25,0.125 --threads 1 --json "$tmp/b.json" >"$tmp/b.out" 2>"$tmp/b.err"
  rc=$?
  if [ $rc -ne 0 ]; then
    bad "bench evict --shape 1b: exit $rc"; tail -5 "$tmp/b.err"
  elif /usr/bin/python3 - "$tmp/b.json" <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1]))
rows = d["rows"]
assert d["shape"] == "1b" and d["dims"]["n_layers"] == 2 and d["dims"]["d_model"] == 128, d
assert {(r["policy"], r["budget_frac"]) for r in rows} == \
    {(p, b) for p in ("h2o", "learned", "learned_sets") for b in (0.25, 0.125)}, rows
for r in rows:
    assert r["cost_only"] is True and r["shape"] == "1b" and "kl" not in r, r
    assert r["steps"] == 16 and r["evictions"] >= 1, r
    assert r["plain_decode_ms"] > 0 and r["decode_ms"] > 0, r
    assert abs(r["total_share"] - r["cost_share"] - r["capture_share"]) < 1e-12, r
    assert abs(r["cost_share"] - r["stats_share"] - r["evict_share"]) < 1e-12, r
    assert r["budget"] == int(r["budget_frac"] * 80 + 0.5), r
    # the per-head path (and the twin's compaction after it) really ran
    assert (r["sets_evictions"] >= 1) == (r["policy"] == "learned_sets"), r
    assert r["full_reads"] == 8 and r["mask_reads"] == 8, r   # one step in two
PY
  then ok "bench evict --shape 1b: every policy evicts in the written model, cost-only rows"
  else bad "bench evict --shape 1b: JSON rows"; fi
  for a in "--1b-dims 2,128,4,,256" "--1b-dims 2,128,4,2" "--1b-dims 2,128,x,2,256" \
           "--budgets 0.25,,0.125" "--models base," "--shape 2b" "--1b-dims 2,130,4,2,256"; do
    "$scdb" bench evict --engine llama.cpp --shape 1b $a >"$tmp/bad.out" 2>"$tmp/bad.err"
    rc=$?
    opt=${a%% *}
    [ $rc -eq 2 ] && grep -q -- "$opt '" "$tmp/bad.err" \
      && ok "bench evict --engine llama.cpp $a: a usage error naming $opt" \
      || { bad "bench evict --engine llama.cpp $a: exit $rc, want 2 naming $opt"; head -3 "$tmp/bad.err"; }
  done
  "$scdb" bench evict --engine llama.cpp --shape 1b --models base >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "--shape 1b writes its own model" "$tmp/bad.err" \
    && ok "bench evict --shape 1b --models: refused" \
    || { bad "bench evict --shape 1b --models: exit $rc"; head -3 "$tmp/bad.err"; }
  "$scdb" bench evict --engine llama.cpp --1b-dims 2,128,4,2,256 >"$tmp/bad.out" 2>"$tmp/bad.err"
  rc=$?
  [ $rc -eq 2 ] && grep -q -- "only with --shape 1b" "$tmp/bad.err" \
    && ok "bench evict --1b-dims without --shape 1b: refused" \
    || { bad "bench evict --1b-dims without --shape 1b: exit $rc"; head -3 "$tmp/bad.err"; }
fi

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
