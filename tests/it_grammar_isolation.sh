#!/bin/sh
# One request's failed draw ends that request alone (golden tiny model,
# 2 CPU stages, one micro-batch, so all live requests share every step):
# - a stream decodes 900 tokens; stage 0 is stopped (SIGSTOP) while a
#   request under a grammar too ambiguous to match (groups of repeats 24
#   deep: a stack for every way to split the answer between the levels)
#   joins, then resumed, so the two meet in one step;
# - that request ends with INVALID_ARGUMENT naming its grammar;
# - the stream completes with the same tokens as alone.
# Before, the last stage refused the whole step and both requests ended.
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-client
T=$P35_RUN/g
p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 4 --max-ctx 1024
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 1024
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 1024 --micro-batches 1 --step-timeout-ms 30000
p35_wait_ready 30
ids64 "$T.p64"
p35_client --prompt-ids "$T.p64" --temp 1 --seed 5 -n 900 --ignore-eos --ids >"$T.alone" ||
    fail "the stream alone failed"

g='[^\x00]'
i=0
while [ $i -lt 24 ]; do g="($g)+"; i=$((i + 1)); done
words() { cat "$1" 2>/dev/null | wc -w; }
: >"$T.beside"
p35_bg_client "$T.beside" --prompt-ids "$T.p64" --temp 1 --seed 5 -n 900 --ignore-eos --ids --timeout 120000
pid=$P35_LAST
started() { [ "$(words "$T.beside")" -ge 5 ]; }
wait_until 30 started || fail "the stream never started"
p35_kill s0 STOP
p35_bg_client "$T.amb" -p "Say anything." --no-think --grammar "root ::= $g" -n 200 --timeout 60000
amb=$P35_LAST
both_active() { [ "$(p35_field "$(p35_client --status --json)" active)" = 2 ]; }
wait_until 30 both_active || { p35_kill s0 CONT; fail "the second request never became active"; }
at=$(words "$T.beside")
p35_kill s0 CONT
if wait "$amb"; then
    fail "the ambiguous grammar's request succeeded: $(head -c 200 "$T.amb")"
fi
grep -q "INVALID_ARGUMENT.*constraint.grammar: too ambiguous to match" "$T.amb.err" ||
    fail "the ambiguous grammar's request: $(cat "$T.amb.err")"
wait "$pid" || fail "the stream failed beside it: $(cat "$T.beside.err")"
[ "$(words "$T.beside")" -eq 900 ] || fail "the stream gave $(words "$T.beside") tokens of 900"
cmp -s "$T.alone" "$T.beside" || fail "the stream's tokens differ beside the failed request"
echo "joined after $at of the stream's 900 tokens: $(head -n 1 "$T.amb.err" | cut -c 1-240)"
ok "a failed draw ends its own request; the stream beside it is unchanged"
