#!/bin/sh
# --step-target-ms on the coordinator, on 2 SIMULATED stages (--backend
# sim: a step of R rows takes 1 + 0.4 R ms on each stage, so the timing
# is the profile's, not this machine's). One stream decodes while a
# 300-token prompt is fed; the coordinator's --trace shows every step:
# - without a target the prompt goes in chunks of 128 rows (steps of
#   ~52 ms);
# - with --step-target-ms 20 the chunks shrink to what a stage runs in
#   about 20 ms (~47 rows by the profile), so the prefill steps take about
#   the target, and the prompt still finishes; as a stream decodes
#   meanwhile, a step gets its share of 2 targets for the stream's token
#   (its gap crosses both stages' steps: 0.85 x 2 x 20 ms / 2, ~39 rows at
#   most by the profile), so the median step holds no more;
# - both runs give the same tokens (chunking never changes the output).
# Load only lengthens the measured steps (fewer rows, never more), so the
# bounds hold on a loaded machine.
set -eu
. "$(dirname "$0")/lib.sh"
setup
PROF=$P35_RUN/sim.profile
# per layer: 250 us + 100 us a row; 4 layers a stage (the head's cost is
# small): a step of R rows ~ 1 + 0.4 R ms
cat >"$PROF" <<'EOF'
name it-step-target
ssm  250 100 0
attn 250 100 0
embd 0 0
head 200 10
EOF
TARGET=20
IDEAL=$(( (TARGET * 1000 - 1200) / 400 ))   # rows a 20 ms step holds by the profile
# ... and the most a step holds while a stream decodes (coord_sched.c: 2
# targets less a 0.85 margin, over 2 stages; the hops and the stream's own
# steps only lower it)
IDEAL_DEC=$(( (2 * TARGET * 850 / 2 - 1200) / 400 ))
awk 'BEGIN { srand(7); for (i = 0; i < 300; i++) printf "%d ", 1 + int(rand() * 400); print "" }' >"$P35_RUN/long.ids"
echo "5 6 7" >"$P35_RUN/short.ids"

# run NAME [coordinator options]: the decode stream, then the long prompt
# once the stream decodes; the trace in $P35_RUN/NAME.trace
run() {
    name=$1
    shift
    p35_stage s0 "$M" 0:4 --backend sim --sim-profile "$PROF" --max-seqs 4 --max-ctx 512
    p35_stage s1 "$M" 4:8 --backend sim --sim-profile "$PROF" --max-seqs 4 --max-ctx 512
    p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 512 --trace "$P35_RUN/$name.trace" "$@"
    p35_wait_ready 30
    p35_bg_client "$P35_RUN/$name.dec" --prompt-ids "$P35_RUN/short.ids" -n 300 --ignore-eos --ids \
        --timeout 120000
    dec=$P35_LAST
    # the stream decodes (a few tokens came back) before the prompt arrives
    t_end=$(( $(date +%s) + 30 ))
    until [ "$(p35_field "$(p35_client --status --json)" tokens_generated)" -ge 5 ] 2>/dev/null; do
        [ "$(date +%s)" -ge "$t_end" ] && fail "$name: the decode stream never started"
        sleep 0.05
    done
    p35_client --prompt-ids "$P35_RUN/long.ids" -n 4 --ignore-eos --ids --timeout 120000 \
        >"$P35_RUN/$name.long" || fail "$name: the long prompt failed: exit $?"
    wait "$dec" || fail "$name: the decode stream failed: $(cat "$P35_RUN/$name.dec.err")"
    p35_stop   # completes the trace
    p35_clear_logs
}

# prefill NAME SKIP: "steps max median_rows median_ms" over the long
# prompt's steps on the slower stage (stage 1: its layers and the head),
# less the first SKIP (while the row budget is learnt from the steps
# measured). The decode stream's 3-token prompt is the first prefill step.
prefill() {
    grep '"ph":"X","pid":1,"tid":2,' "$P35_RUN/$1.trace" | grep -v '"prefill_rows":0}' | awk -v skip="$2" '
        { r = $0; sub(/.*"prefill_rows":/, "", r); d = $0; sub(/.*"dur":/, "", d)
          n++; if (n > 1 + skip) { k++; rows[k] = r + 0; dur[k] = (d + 0) / 1000 } }
        function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++)
                                           if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                       return k ? a[int((k + 1) / 2)] : 0 }
        END { mx = 0; for (i = 1; i <= k; i++) if (rows[i] > mx) mx = rows[i]
              printf "%d %d %d %.1f\n", k, mx, med(rows, k), med(dur, k) }'
}

run plain
run target --step-target-ms $TARGET

set -- $(prefill plain 0)
echo "no target: the prompt in $1 steps on stage 1: largest $2 rows, median $3 rows, median step $4 ms"
[ "$2" -ge 100 ] || fail "no target: the prompt should go in chunks of 128 rows, the largest step had $2"
plain_ms=$4
set -- $(prefill target 1)
echo "--step-target-ms $TARGET: the prompt in $1 steps on stage 1 (after the first): largest $2 rows, median $3 rows, median step $4 ms (the profile: $IDEAL rows in $TARGET ms)"
[ "$1" -ge 3 ] || fail "--step-target-ms $TARGET: the 300-token prompt should take several steps, took $1 more after the first"
[ "$2" -le $((IDEAL * 13 / 10 + 1)) ] ||
    fail "--step-target-ms $TARGET: a prefill step of $2 rows, more than ~$IDEAL that fit the target"
[ "$3" -le $IDEAL_DEC ] ||
    fail "--step-target-ms $TARGET: the median prefill step beside a decoding stream has $3 rows, more than the $IDEAL_DEC of its share of 2 targets"
[ "$3" -ge $((IDEAL / 4)) ] ||
    fail "--step-target-ms $TARGET: the median prefill step has $3 rows, under a quarter of the $IDEAL that fit"
awk -v t="$4" -v p="$plain_ms" -v g=$TARGET 'BEGIN { exit !(t < p && t <= 2 * g) }' ||
    fail "--step-target-ms $TARGET: the median prefill step took $4 ms (without a target: $plain_ms ms)"

for f in dec long; do
    cmp -s "$P35_RUN/plain.$f" "$P35_RUN/target.$f" ||
        fail "the $f stream's tokens differ with --step-target-ms: $(head -c 200 "$P35_RUN/plain.$f") vs $(head -c 200 "$P35_RUN/target.$f")"
    [ -s "$P35_RUN/plain.$f" ] || fail "the $f stream gave no tokens"
done
ok "--step-target-ms sizes the prefill chunks to the target step time (less beside a decoding stream); the same tokens either way"
