#!/bin/sh
# A long prompt's chunks flow back to back through 3 stages (golden tiny
# model): the tokens equal qwen35-run's (one process) greedy and seeded,
# with the prefix cache's checkpoints on the way (every 1024 tokens and at
# each message boundary, saved stage by stage as the chunk passes) and a
# second request restoring them; the
# coordinator's trace shows stage 0 working on a chunk while a later stage
# works on the one before (with --no-prefill-pipeline it never does); and
# the last stage killed while the prompt is in flight: the rebuilt request
# gives the same tokens.
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-run
T=$P35_RUN/pp
N=16
ids64 "$T.p64"
# one prompt without <|im_start|> (507, a message boundary: a checkpoint
# stop), one with a boundary every 64 tokens
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do cat "$T.p64"; done >"$T.msgs"
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28; do cat "$T.p64"; done |
    tr -s ' \n' '\n\n' | grep -vx 507 >"$T.long"
n_prompt=$(wc -w <"$T.long")

ref() { "$BIN/qwen35-run" -m "$M" --tokens "${REF_TOKENS:-$T.long}" -n $N "$@" 2>/dev/null | tr -s ' \n' ' ' | sed 's/ $//;s/^ //'; }
ids() { tr -s ' \n' ' ' <"$1" | sed 's/ $//;s/^ //'; }

# overlaps TRACE: prefill steps of one stage that overlap in time a prefill
# step of another stage
overlaps() {
    awk '/"ph":"X"/ { t = $0; sub(/.*"tid":/, "", t); ts = $0; sub(/.*"ts":/, "", ts); d = $0; sub(/.*"dur":/, "", d)
                      p = $0; sub(/.*"prefill_rows":/, "", p)
                      if (p + 0 > 0) { n++; T[n] = t + 0; B[n] = ts + 0; E[n] = ts + d } }
         END { c = 0; for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                   if (T[i] != T[j] && B[i] < E[j] && B[j] < E[i]) c++
               print c }' "$1"
}

start() {   # start NAME [coordinator options]
    _n=$1
    shift
    p35_stage s0 "$M" 0:3 --threads 1 --max-seqs 2 --max-ctx 4096
    p35_stage s1 "$M" 3:6 --threads 1 --max-seqs 2 --max-ctx 4096
    p35_stage s2 "$M" 6:8 --threads 1 --max-seqs 2 --max-ctx 4096
    p35_coord "$M" s0 s1 s2 -- --max-seqs 2 --max-ctx 4096 --trace "$T.$_n.trace" "$@"
    p35_wait_ready 30
}

greedy=$(ref)
seeded=$(ref --temp 0.9 --seed 4 --top-k 30)
msgs=$(REF_TOKENS=$T.msgs ref)

start pipe
p35_client --prompt-ids "$T.long" -n $N --ignore-eos --ids >"$T.g1" || fail "greedy request failed"
p35_client --prompt-ids "$T.long" -n $N --ignore-eos --ids --temp 0.9 --seed 4 --top-k 30 >"$T.s1" ||
    fail "seeded request failed"
p35_client --prompt-ids "$T.long" -n $N --ignore-eos --ids >"$T.g2" || fail "the repeated request failed"
[ "$(ids "$T.g1")" = "$greedy" ] || fail "pipelined greedy [$(ids "$T.g1")] != qwen35-run [$greedy]"
[ "$(ids "$T.s1")" = "$seeded" ] || fail "pipelined seeded [$(ids "$T.s1")] != qwen35-run [$seeded]"
[ "$(ids "$T.g2")" = "$greedy" ] || fail "restored from checkpoints [$(ids "$T.g2")] != qwen35-run [$greedy]"
cached=$(p35_field "$(status)" prefix_hits 2>/dev/null || echo "?")
p35_stop
ov=$(overlaps "$T.pipe.trace")
[ "$ov" -gt 0 ] || fail "no prefill step overlapped another stage's: the chunks did not flow back to back"
echo "pipelined: $n_prompt-token prompt through 3 stages, greedy and seeded equal qwen35-run, a repeat too (prefix hits $cached); $ov overlapping prefill steps"

start msgs
p35_client --prompt-ids "$T.msgs" -n $N --ignore-eos --ids >"$T.m1" || fail "boundaries: the request failed"
p35_client --prompt-ids "$T.msgs" -n $N --ignore-eos --ids >"$T.m2" || fail "boundaries: the repeat failed"
[ "$(ids "$T.m1")" = "$msgs" ] || fail "boundaries: [$(ids "$T.m1")] != qwen35-run [$msgs]"
[ "$(ids "$T.m2")" = "$msgs" ] || fail "boundaries, restored: [$(ids "$T.m2")] != qwen35-run [$msgs]"
hits=$(p35_field "$(status)" prefix_hits 2>/dev/null || echo 0)
p35_stop
ov=$(overlaps "$T.msgs.trace")
[ "$ov" -gt 0 ] || fail "boundaries: no overlapping prefill steps (a checkpoint at each boundary drained the pipeline)"
[ "${hits:-0}" -ge 1 ] || fail "boundaries: the repeat restored nothing (prefix hits ${hits:-0})"
echo "a boundary every 64 tokens: checkpoints saved stage by stage, $ov overlapping prefill steps, the repeat restored ($hits hits), equal"

start serial --no-prefill-pipeline --prefix-cache off
p35_client --prompt-ids "$T.long" -n $N --ignore-eos --ids >"$T.g3" || fail "--no-prefill-pipeline: the request failed"
[ "$(ids "$T.g3")" = "$greedy" ] || fail "--no-prefill-pipeline [$(ids "$T.g3")] != qwen35-run [$greedy]"
p35_stop
ov=$(overlaps "$T.serial.trace")
[ "$ov" -eq 0 ] || fail "--no-prefill-pipeline: $ov prefill steps overlapped (one request's chunks must not)"
echo "--no-prefill-pipeline: equal, no overlap"

# the last stage killed while the prompt is in flight, restarted
start kill --prefix-cache off --step-timeout-ms 3000 --replay-wait-ms 20000
: >"$T.k"
p35_bg_client "$T.k" --prompt-ids "$T.long" -n $N --ignore-eos --ids --timeout 60000
pid=$P35_LAST
p35_wait_file "$P35_RUN/s2.log" "serving" 1 >/dev/null 2>&1 || true
i=0
until grep -q '"prefill_rows":[1-9]' "$T.kill.trace" 2>/dev/null || [ $i -ge 200 ]; do sleep 0.02; i=$((i + 1)); done
p35_kill s2 KILL
sleep 0.5
p35_stage s2 "$M" 6:8 --threads 1 --max-seqs 2 --max-ctx 4096
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
wait "$pid" || fail "after the kill: the request failed: $(cat "$T.k.err")"
[ "$(ids "$T.k")" = "$greedy" ] || fail "after the kill [$(ids "$T.k")] != qwen35-run [$greedy]"
grep -q 'rebuilding [1-9]' "$P35_RUN/coord.log" || fail "the kill rebuilt nothing (the request was done before it)"
echo "the last stage killed mid-prompt: rebuilt, the same tokens"
ok "prefill pipelined across stages"
