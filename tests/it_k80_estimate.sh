#!/bin/sh
# make bench-k80-estimate's script on the golden tiny model (seconds, not
# the 35B-A3B): the plan and the table come out labelled as an estimate,
# each profile is one qwen35-stage --backend sim accepts (the stages run
# it), a wider bus gives smaller memory-bound step times, and every
# figure of the table is a positive rate.
set -u
. "$(dirname "$0")/lib.sh"
setup

QWEN35_BUILD=$T/b BIN=$BIN QWEN35_GOLDEN=$G BENCH_MODEL=$G/models/tiny-Q8_0.gguf K80_CTX=4096 K80_PROMPT=300 \
    K80_STREAMS="1 4" sh tools/bench_k80_estimate.sh > "$T/out" 2>&1 || fail "exit $?: $(tail -20 "$T/out")"
grep -q "an ESTIMATE" "$T/out" || fail "not labelled an estimate"
grep -q "f16 KV: NOT IMPLEMENTED" "$T/out" || fail "no capacity table from the plan"
for bw in 150 240; do
    row=$(grep "^$bw GB/s |" "$T/out")
    echo "$row" | awk -F'|' '{ for (i = 2; i <= 4; i++) { v = $i; sub(/^ */, "", v); if (v + 0 <= 0) exit 1 } }' ||
        fail "$bw GB/s: a figure is not a positive rate: '$row'"
    for m in decode prefill; do
        [ -f "$T/b/k80-estimate/k80-$bw-$m.profile" ] || fail "no $m profile for $bw GB/s"
    done
done
fixed() { awk -v k="$1" '$1 == k { print $2 }' "$T/b/k80-estimate/k80-$2-decode.profile"; }
awk -v a="$(fixed head 150)" -v b="$(fixed head 240)" 'BEGIN { exit !(b < a) }' ||
    fail "the LM head's step is not shorter at 240 GB/s ($(fixed head 240) us) than at 150 ($(fixed head 150) us)"
ok "estimate labelled, rates positive, profiles per bandwidth"
