#!/bin/sh
# make bench-pipeline — what pipelining buys: a generated mini Q4_K_M model
# (12 layers of the real 35B-A3B sizes, 64 experts, the Qwen3 vocabulary),
# served (a) by 1 stage x 1 thread holding every layer and (b) by 2 stages
# x 1 thread split so both take about the same time per decode step as
# measured here (qwen35-info --plan 2 --batch B --measure). 8 concurrent streams of 64
# generated tokens each.
# Prints aggregate decode tokens/s of both and their ratio (target >= 1.6),
# and each stage's time idle waiting on the wire as a share of its busy
# time while all 8 streams decode (target <= 5%), from the stages' own
# stats (busy_s, idle_s) read through qwen35-client --status.
#
# The coordinator of (b) splits the streams into M micro-batches (its
# --micro-batches, BENCH_MICRO_BATCHES, default its own default: one per
# stage), so each decode step of a stage carries B = streams / M sequences
# (rounded up): B sequences read the union of their experts but the LM head
# once, which is what the plan balances.
#
# Aggregate decode tokens/s = tokens generated after each stream's first
# token / (last token's time - first stream's first token time).
#
# Also printed: each stage's forward time per token, and what that allows:
# a micro-batch of B sequences reads the union of their experts, so each
# of 2 stages spends more per token than 1 stage decoding all streams at
# once; 2 x (1 stage's time per token / the 2 stages' together) is the
# most 2 stages can gain with no idle time at all.
#
# Env: BIN, QWEN35_GOLDEN, BENCH_PRESET (mini-12L, the default, or
# 35b-a3b: the full-size model, 40 layers, 21.2 GB, generated once by
# tools/bench_preset.sh, which skips the bench when disk or memory is
# short), BENCH_MODEL (any other file), BENCH_STREAMS (8), BENCH_TOKENS (64),
# BENCH_MICRO_BATCHES (2), BENCH_PLAN (time, the default: qwen35-info
# --measure, balance the seconds a step takes here; bytes: balance the
# bytes a step reads),
# BENCH_SPLIT ("A:B C:D" instead of the plan).
set -eu
P35_ME=bench-pipeline
. "$(dirname "$0")/pipeline.sh"

GOLDEN=${QWEN35_GOLDEN:-../shared/golden}
PRESET=${BENCH_PRESET:-mini-12L}
[ "$PRESET" = mini ] && PRESET=mini-12L     # make's default preset: this bench's 12-layer mini
if [ -n "${BENCH_MODEL:-}" ]; then
    MODEL=$BENCH_MODEL
else
    rc=0
    MODEL=$(sh "$(dirname "$0")/../tools/bench_preset.sh" "$PRESET" "$BIN" "$GOLDEN") || rc=$?
    [ "$rc" -eq 3 ] && exit 0          # skipped: bench_preset.sh said why
    [ "$rc" -eq 0 ] || p35_die "no model for BENCH_PRESET=$PRESET"
fi
[ -f "$MODEL" ] || p35_die "$MODEL: no such model (BENCH_MODEL)"
STREAMS=${BENCH_STREAMS:-8}
TOKENS=${BENCH_TOKENS:-64}
N_LAYER=$("$BIN/qwen35-info" "$MODEL" | sed -n 's/^ *layers *\([0-9]*\) main.*/\1/p')
[ -n "$N_LAYER" ] || p35_die "qwen35-info $MODEL: no layer count"
MICRO=${BENCH_MICRO_BATCHES:-2}
BATCH=$(( (STREAMS + MICRO - 1) / MICRO ))
PLAN_BY=${BENCH_PLAN:-time}
case $PLAN_BY in bytes|time) ;; *) p35_die "BENCH_PLAN=$PLAN_BY: expected bytes or time" ;; esac

# The split: qwen35-info --plan 2 --batch B prints the two ranges and the
# bytes each reads per decode step (BENCH_SPLIT="A:B C:D" overrides it).
if [ -n "${BENCH_SPLIT:-}" ]; then
    R0=${BENCH_SPLIT% *} R1=${BENCH_SPLIT#* }
    echo "bench-pipeline: split from BENCH_SPLIT"
else
    [ -x "$BIN/qwen35-info" ] || p35_die "$BIN/qwen35-info missing (or set BENCH_SPLIT=\"0:A A:$N_LAYER\")"
    set -- --plan 2 --batch "$BATCH"
    [ "$PLAN_BY" = time ] && set -- "$@" --measure --threads 1
    PLAN=$("$BIN/qwen35-info" "$@" "$MODEL") || p35_die "qwen35-info $* $MODEL failed"
    echo "bench-pipeline: qwen35-info $* ($STREAMS streams / $MICRO micro-batches):"
    printf '%s\n' "$PLAN" | grep '^# *\(plan\|stage [0-9]\|measured\|layer \)' | sed 's/^# */  /'
    RANGES=$(printf '%s\n' "$PLAN" | sed -n 's/.*stage [0-9]*: layers \([0-9]*:[0-9]*\).*/\1/p')
    R0=$(printf '%s\n' "$RANGES" | sed -n 1p)
    R1=$(printf '%s\n' "$RANGES" | sed -n 2p)
    [ -n "$R0" ] && [ -n "$R1" ] || p35_die "no two layer ranges A:B in the plan above"
fi
echo "bench-pipeline: split: stage 0 = layers $R0, stage 1 = layers $R1; $MICRO micro-batches of up to $BATCH streams"

p35_init
OUTS=$(for i in $(seq 1 "$STREAMS"); do printf '%s ' "$P35_RUN/o$i"; done)
# prompts: 8 different short id sequences (ids from the vocabulary's first 5000)
for i in $(seq 1 "$STREAMS"); do
    awk -v s="$i" 'BEGIN { srand(s); for (k = 0; k < 12; k++) printf "%d ", 100 + int(rand() * 5000); print "" }' \
        >"$P35_RUN/p$i.ids"
done

# compute_per_token STATUS0 STATUS1: each stage's forward time per token it
# ran between two --status --json snapshots (compare with qwen35-info
# --measure: what running beside the other stage costs).
compute_per_token() {
    printf '%s\n%s\n' "$1" "$2" | awk '
        { n = split($0, st, /"endpoint":/)
          for (i = 2; i <= n; i++) {
              b = st[i]; sub(/.*"busy_s":/, "", b); b += 0
              t = st[i]; sub(/.*"tokens":/, "", t); t += 0
              if (NR == 1) { b0[i] = b; t0[i] = t } else { db[i] = b - b0[i]; dt[i] = t - t0[i] }
          } }
        END { for (i = 2; i <= n; i++)
                  if (dt[i] > 0) printf " stage %d: %.1f ms;", i - 2, 1000 * db[i] / dt[i] }'
}

# run LABEL: 8 streams against the running pipeline; prints the rate and
# leaves "RATE" in $RATE and the stages' wire-idle shares in $IDLE.
run() {
    label=$1
    pids=""
    for i in $(seq 1 "$STREAMS"); do
        p35_bg_client "$P35_RUN/o$i" --prompt-ids "$P35_RUN/p$i.ids" -n "$TOKENS" --ignore-eos \
            --json --seed "$i" --timeout 900000
        pids="$pids $P35_LAST"
    done
    # stage stats while every stream decodes: from all streams' first token
    # to the first stream's end
    for i in $(seq 1 "$STREAMS"); do p35_wait_file "$P35_RUN/o$i" '"event":"piece"' 600 || true; done
    sleep 1.1   # stage stats reach the coordinator about once a second
    st0=$(p35_client --status --json)
    t_end=$(( $(date +%s) + 600 ))
    # shellcheck disable=SC2086
    until grep -l '"event":"final"\|"event":"error"' $OUTS >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$t_end" ] && break
        sleep 0.05
    done
    st1=$(p35_client --status --json)
    for p in $pids; do wait "$p" || p35_die "$label: a stream failed: $(cat "$P35_RUN"/o*.err)"; done
    RATE=$(awk -F'"t":' '
        /"event":"piece"/ {
            t = $2 + 0
            s = $0; sub(/.*"ids":\[/, "", s); sub(/\].*/, "", s)
            n = s == "" ? 0 : split(s, parts, ",")
            if (!(FILENAME in first)) {      # a stream first token: not decode
                first[FILENAME] = t; n--
                if (t0 == 0 || t < t0) t0 = t
            }
            cnt += n
            if (t > t1) t1 = t
        }
        END { if (t1 > t0) printf "%.2f", cnt / (t1 - t0); else print "0" }' $OUTS)
    IDLE=$(p35_busy_between "$st0" "$st1")
    echo "bench-pipeline: $label: $STREAMS streams x $TOKENS tokens: aggregate decode $RATE tokens/s;$IDLE"
    CPT=$(compute_per_token "$st0" "$st1")
    echo "bench-pipeline: $label: compute per token:$CPT"
    # the token record of the last run, for the cross-check below
    # shellcheck disable=SC2086
    cat $OUTS | grep -o '"ids":\[[0-9,]*\]' | sort >"$P35_RUN/ids.$label"
}

p35_stage all "$MODEL" "0:$N_LAYER" --threads 1 --max-seqs "$STREAMS" --max-ctx 256
p35_coord "$MODEL" all -- --max-seqs "$STREAMS" --max-ctx 256
p35_wait_ready 600
run "1 stage x 1 thread"
RATE1=$RATE
CPT1=$CPT
p35_stop
p35_clear_logs

p35_stage s0 "$MODEL" "$R0" --threads 1 --max-seqs "$STREAMS" --max-ctx 256
p35_stage s1 "$MODEL" "$R1" --threads 1 --max-seqs "$STREAMS" --max-ctx 256
p35_coord "$MODEL" s0 s1 -- --max-seqs "$STREAMS" --max-ctx 256 --micro-batches "$MICRO"
p35_wait_ready 600
run "2 stages x 1 thread"
RATE2=$RATE
IDLE2=$IDLE
CPT2=$CPT

cmp -s "$P35_RUN/ids.1 stage x 1 thread" "$P35_RUN/ids.2 stages x 1 thread" ||
    echo "bench-pipeline: WARNING: the two configurations generated different tokens"
RATIO=$(awk -v a="$RATE2" -v b="$RATE1" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
echo "bench-pipeline: result: 1 stage $RATE1 tokens/s, 2 stages $RATE2 tokens/s, ratio ${RATIO}x (target >= 1.6x)"
echo "bench-pipeline: 2 stages while all streams decode:$IDLE2 (target: idle <= 5% of busy)"
# What batching allows: the 2 stages' compute per token together against
# the 1 stage's (each stage decodes micro-batches of B, the 1 stage all
# streams at once; fewer sequences per step read more expert bytes per
# token): with no idle time at all, 2 stages reach 2 x the ratio.
printf '%s\n%s\n' "$CPT1" "$CPT2" | awk -v b="$BATCH" -v s="$STREAMS" '
    { n = split($0, f, /: |;/); t = 0
      for (i = 1; i <= n; i++) if (f[i] ~ / ms$/) t += f[i] + 0
      c[NR] = t }
    END { if (c[1] > 0 && c[2] > 0)
        printf "bench-pipeline: compute per token: 1 stage %.1f ms (steps of %d), 2 stages %.1f ms together (steps of %d): with no idle time, 2 stages reach at most %.2fx\n", c[1], s, c[2], b, 2 * c[1] / c[2] }'
