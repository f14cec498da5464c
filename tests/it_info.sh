#!/bin/sh
# qwen35-info on the golden models: attention at layers 3 and 7 (SSM
# elsewhere), the right tensor type mix, a --plan that covers every layer
# once; clean errors on bad input; reads what qwen35-mkmodel writes.
set -u
BIN=${QWEN35_BUILD:-build}/bin
G=${QWEN35_GOLDEN:-../shared/golden}
T=$(mktemp -d /tmp/q35-it-info-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "it_info: FAIL: $*"; fail=1; }

# model, then "type count" pairs of the expected mix (149 tensors each)
check_model() {
    m=$1; shift
    out=$T/info.txt
    "$BIN/qwen35-info" "$G/models/$m" > "$out" 2> "$T/err" || { bad "$m: exit $? $(cat "$T/err")"; return; }
    [ "$(grep -Ec '^ +[0-9]+ +attn ' "$out")" = 2 ] || bad "$m: not 2 attention layers"
    grep -Eq '^ +3 +attn ' "$out" || bad "$m: layer 3 is not attention"
    grep -Eq '^ +7 +attn ' "$out" || bad "$m: layer 7 is not attention"
    [ "$(grep -Ec '^ +[0-9]+ +ssm ' "$out")" = 6 ] || bad "$m: not 6 SSM layers"
    grep -q 'at layers 3 7$' "$out" || bad "$m: summary does not list attention at 3 7"
    mix=$(sed -n '/^tensor types/,/^per decoded token/p' "$out" | awk 'NF >= 3 && $2 ~ /^[0-9]+$/ { print $1, $2 }' | tr '\n' ' ')
    [ "$mix" = "$* " ] || bad "$m: type mix '$mix', expected '$* '"
}
check_model tiny-Q8_0.gguf   f32 61 q8_0 88
check_model tiny-Q4_K_M.gguf f32 61 q4_K 75 q6_K 13
check_model tiny-Q3_K_M.gguf f32 61 q3_K 61 q4_K 24 q5_K 2 q6_K 1

# --plan 3: three stage blocks in the INI form, contiguous, covering 0:8
"$BIN/qwen35-info" "$G/models/tiny-Q4_K_M.gguf" --plan 3 > "$T/plan.txt" || bad "--plan 3 exit $?"
ranges=$(grep '^layers = ' "$T/plan.txt" | sed 's/layers = //' | tr '\n' ' ')
[ "$(grep -c '^\[stage\]$' "$T/plan.txt")" = 3 ] || bad "--plan 3: not 3 [stage] sections"
[ "$(grep -c '^# /etc/qwen35/stage-[012].conf$' "$T/plan.txt")" = 3 ] || bad "--plan 3: stage file comments"
grep -q "^model = /.*/tiny-Q4_K_M.gguf$" "$T/plan.txt" || bad "--plan 3: model line"
prev=0
for r in $ranges; do
    a=${r%:*}; b=${r#*:}
    [ "$a" = "$prev" ] && [ "$b" -gt "$a" ] || bad "--plan 3: range $r after $prev"
    prev=$b
done
[ "$prev" = 8 ] || bad "--plan 3: ranges '$ranges' do not end at 8"
# the file from the first block is what a stage reads: plain INI, no stray lines
awk '/^# \/etc\/qwen35\/stage-0.conf/{on=1; next} /^$/{on=0} on' "$T/plan.txt" > "$T/stage-0.conf"
[ "$(grep -vc -e '^\[stage\]$' -e '^model = ' -e '^layers = ' "$T/stage-0.conf")" = 0 ] || bad "stage-0 block has other lines"

# bad input: one line on stderr naming the problem, non-zero exit
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 9 > /dev/null 2> "$T/err" && bad "--plan 9 accepted"
grep -q -- "--plan 9: expected 1..8" "$T/err" || bad "--plan 9 message: $(cat "$T/err")"
"$BIN/qwen35-info" "$G/tokenizer/qwen3-vocab.gguf" > /dev/null 2> "$T/err" && bad "vocab-only accepted"
grep -q "qwen3-vocab.gguf: .*key 'qwen35moe.block_count': missing" "$T/err" || bad "vocab-only message: $(cat "$T/err")"
head -c 30000 "$G/models/tiny-Q8_0.gguf" > "$T/cut.gguf"
"$BIN/qwen35-info" "$T/cut.gguf" > /dev/null 2> "$T/err" && bad "truncated file accepted"
[ "$(wc -l < "$T/err")" = 1 ] && grep -q "cut.gguf: .*past the end of the file" "$T/err" || bad "truncated message: $(cat "$T/err")"

# reads what the generator writes
"$BIN/qwen35-mkmodel" --preset micro --types q8_0 -o "$T/micro.gguf" 2> /dev/null || bad "mkmodel micro"
"$BIN/qwen35-info" "$T/micro.gguf" --plan 2 > "$T/micro.txt" || bad "info on micro: exit $?"
grep -Eq '^ +1 +attn ' "$T/micro.txt" || bad "micro: layer 1 is not attention"

[ $fail = 0 ] && echo "it_info: ok"
exit $fail
