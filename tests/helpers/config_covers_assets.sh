#!/usr/bin/env bash
# config_covers_assets.sh SHARE INI — the service's configuration INI names
# every asset the install ships under SHARE (issue 25 item 5): each
# models/NAME/config.json as [model NAME] with that config, each
# pairs/P__C.safetensors as the file of a [pair CODEBOOK C] section, each
# codebooks/*.safetensors as a [codebook] file and each
# policies/*.safetensors as a [policy] file, and each adapters/NAME (a LoRA
# adapter) matched by the dirs of a [consumers GROUP]; a pair is also named
# by a group whose dirs match its consumer and whose file, "{name}" replaced,
# is that pair.  Prints what is missing, one
# per line; exit 0 when nothing is, 1 otherwise (2: bad arguments).
set -u
share="$1" ini="$2"
[ -d "$share" ] && [ -r "$ini" ] || { echo "usage: $0 SHARE INI" >&2; exit 2; }

# "SECTION|KEY|VALUE" for every key line of the ini (comments dropped)
flat=$(awk '
  /^[ \t]*[;#]/ { next }
  /^[ \t]*\[/ { s = $0; sub(/^[ \t]*\[/, "", s); sub(/\].*/, "", s); next }
  /=/ { k = $0; sub(/[ \t]*=.*/, "", k); sub(/^[ \t]*/, "", k)
        v = $0; sub(/^[^=]*=[ \t]*/, "", v); sub(/[ \t]*[;#].*$/, "", v); sub(/[ \t]*$/, "", v)
        print s "|" k "|" v }' "$ini")
missing=0
need() {  # need DESCRIPTION REGEX
  if ! grep -qE "$2" <<<"$flat"; then echo "missing: $1"; missing=1; fi
}
for c in "$share"/models/*/config.json; do
  [ -e "$c" ] || continue
  m=$(basename "$(dirname "$c")")
  need "[model $m] config = $c" "^model $m\\|config\\|$c\$"
done
# in_group NAME [PAIR]: a [consumers] group's dirs match a directory named
# NAME (and, with PAIR, its file template names PAIR for it)
in_group() {
  local g dirs file d
  for g in $(grep -E '^consumers [^|]+\|dirs\|' <<<"$flat" | cut -d'|' -f1 | sort -u | tr ' ' '\001'); do
    g=${g//$'\001'/ }
    dirs=$(grep -E "^$g\|dirs\|" <<<"$flat" | cut -d'|' -f3-)
    file=$(grep -E "^$g\|file\|" <<<"$flat" | cut -d'|' -f3-)
    for d in $dirs; do
      for m in $d; do
        [ "$(basename "$m")" = "$1" ] || continue
        [ -e "$m/adapter_config.json" ] || [ -e "$m/config.json" ] || continue
        [ $# -lt 2 ] && return 0
        [ "${file//\{name\}/$1}" = "$2" ] && return 0
      done
    done
  done
  return 1
}
for p in "$share"/pairs/*__*.safetensors; do
  [ -e "$p" ] || continue
  cons=$(basename "$p" .safetensors); cons=${cons#*__}
  # P__fleet: a fleet's shared part, loaded through the adapter pairs that
  # reference it (schema/FORMATS.md, "Pair", kinds), not a [pair] of its own
  [ "$cons" = fleet ] && continue
  in_group "$cons" "$p" && continue
  need "[pair ... $cons] file = $p" "^pair [^ ]+ $cons\\|file\\|$p\$"
done
for a in "$share"/adapters/*/adapter_config.json; do
  [ -e "$a" ] || continue
  n=$(basename "$(dirname "$a")")
  in_group "$n" || { echo "missing: adapter $n in the dirs of a [consumers] group"; missing=1; }
done
for b in "$share"/codebooks/*.safetensors; do
  [ -e "$b" ] || continue
  need "[codebook ...] file = $b" "^codebook [^|]+\\|file\\|$b\$"
done
for p in "$share"/policies/*.safetensors; do
  [ -e "$p" ] || continue
  need "[policy ...] file = $p" "^policy [^|]+\\|file\\|$p\$"
done
exit $missing
