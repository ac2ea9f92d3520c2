#!/usr/bin/env bash
# test_cli_gguf.sh SCDB — `scdb export-gguf` and GGUF files through the scdb
# command (issue 39 item 2): a family model and an adapter exported, their
# fingerprints those of the directories (the adapter's found beside its base,
# or given with --base), the usage errors and refusals with their exit codes.
# The library's claims are test_gguf's and test_model_gguf's.
set -u
scdb="$1"
. "$(dirname "$0")/helpers/cli_expect.sh"

data="${SCDB_DATA:-$(dirname "$scdb")/../share/scdb}"

expect 0 "export-gguf --help" -- "$scdb" export-gguf --help
grep -q "rwkv" "$tmp/out" && grep -q "general.base_model.0.name" "$tmp/out" \
  && ok "export-gguf --help names the vocabulary and how the base is found" || bad "export-gguf --help"
"$scdb" --help | grep -q "export-gguf" && ok "scdb --help lists export-gguf" || bad "scdb --help lists export-gguf"
expect 2 "export-gguf: no -o" -- "$scdb" export-gguf "$data/models/base"
expect 2 "export-gguf: bad --dtype" -- "$scdb" export-gguf "$data/models/base" -o "$tmp/x.gguf" --dtype q4
expect 2 "export-gguf: unknown option" -- "$scdb" export-gguf "$data/models/base" -o "$tmp/x.gguf" --frob
expect 1 "export-gguf: no such model" -- "$scdb" export-gguf "$tmp/none" -o "$tmp/x.gguf"
expect 1 "export-gguf: missing output folder" -- "$scdb" export-gguf "$data/models/base" -o "$tmp/no/x.gguf"

mkdir -p "$tmp/g"
expect 0 "export-gguf base" -- "$scdb" export-gguf "$data/models/base" -o "$tmp/g/base.gguf"
grep -q "^wrote .*base.gguf (model, f32)" "$tmp/out" && ok "export-gguf says what it wrote" || bad "export-gguf output"
expect 0 "export-gguf c-header" -- "$scdb" export-gguf "$data/adapters/c-header" -o "$tmp/g/c-header.gguf"
expect 0 "export-gguf base f16" -- "$scdb" export-gguf "$data/models/base" -o "$tmp/g/base16.gguf" --dtype f16

fp() { "$scdb" fingerprint "$@" 2>/dev/null | awk '{print $1}'; }
[ -n "$(fp "$data/models/base")" ] && [ "$(fp "$data/models/base")" = "$(fp "$tmp/g/base.gguf")" ] \
  && ok "an f32 export has the model's fingerprint" || bad "base.gguf fingerprint"
[ "$(fp "$data/adapters/c-header")" = "$(fp "$tmp/g/c-header.gguf")" ] \
  && ok "the adapter export has the PEFT adapter's fingerprint (base found beside it)" || bad "c-header.gguf fingerprint"
mkdir -p "$tmp/apart"
cp "$tmp/g/c-header.gguf" "$tmp/apart/"
expect 1 "fingerprint: an adapter away from its base" -- "$scdb" fingerprint "$tmp/apart/c-header.gguf"
grep -q "not found" "$tmp/err" && ok "... says the base is not found" || bad "base not found message"
[ "$(fp --base "$tmp/g/base.gguf" "$tmp/apart/c-header.gguf")" = "$(fp "$data/adapters/c-header")" ] \
  && ok "fingerprint --base BASE ADAPTER" || bad "fingerprint --base"
[ "$(fp --models-dir "$tmp/g" "$tmp/apart/c-header.gguf")" = "$(fp "$data/adapters/c-header")" ] \
  && ok "fingerprint --models-dir finds NAME.gguf" || bad "fingerprint --models-dir"
[ "$(fp "$tmp/g/base16.gguf")" != "$(fp "$tmp/g/base.gguf")" ] && ok "an f16 export fingerprints as its values" \
  || bad "base16 fingerprint"
# a GGUF model re-exported: the same fingerprint
expect 0 "export-gguf of a GGUF" -- "$scdb" export-gguf "$tmp/g/base16.gguf" -o "$tmp/g/again.gguf"
[ "$(fp "$tmp/g/again.gguf")" = "$(fp "$tmp/g/base16.gguf")" ] && ok "re-export keeps the values" || bad "re-export"
cli_expect_done
