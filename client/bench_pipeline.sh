#!/bin/sh
# make bench-pipeline — what pipelining buys: a generated mini Q4_K_M model
# (12 layers of the real 35B-A3B sizes, 64 experts, the Qwen3 vocabulary),
# served (a) by 1 stage x 1 thread holding every layer and (b) by 2 stages
# x 1 thread split so both read about the same weight bytes per decode
# step (qwen35-info --plan 2 --batch B). 8 concurrent streams of 64
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
# Also printed: the most 2 stages can gain where decoding is bandwidth-bound
# (1 stage reads the union of 8 sequences' experts per step, each stage
# the union of B's: more bytes per token), and each stage's forward time
# per token (against qwen35-info --measure: what sharing the machine costs).
#
# Env: BIN, QWEN35_GOLDEN, BENCH_MODEL (default build/models/…; generated
# when missing, ~2 GB), BENCH_STREAMS (8), BENCH_TOKENS (64),
# BENCH_MICRO_BATCHES (2), BENCH_PLAN (bytes: balance the bytes a step reads;
# time: qwen35-info --measure, balance the seconds a step takes here),
# BENCH_SPLIT ("A:B C:D" instead of the plan).
set -eu
P35_ME=bench-pipeline
. "$(dirname "$0")/pipeline.sh"

GOLDEN=${QWEN35_GOLDEN:-../shared/golden}
MODEL=${BENCH_MODEL:-${QWEN35_BUILD:-build}/models/mini-12L-64x-q4_k_m.gguf}
STREAMS=${BENCH_STREAMS:-8}
TOKENS=${BENCH_TOKENS:-64}
N_LAYER=12
MICRO=${BENCH_MICRO_BATCHES:-2}
BATCH=$(( (STREAMS + MICRO - 1) / MICRO ))
PLAN_BY=${BENCH_PLAN:-bytes}
case $PLAN_BY in bytes|time) ;; *) p35_die "BENCH_PLAN=$PLAN_BY: expected bytes or time" ;; esac

if [ ! -f "$MODEL" ]; then
    [ -x "$BIN/qwen35-mkmodel" ] || p35_die "$BIN/qwen35-mkmodel missing (run make first)"
    mkdir -p "$(dirname "$MODEL")"
    VOCAB=$GOLDEN/tokenizer/qwen3-vocab.gguf
    set -- --preset mini --layers $N_LAYER --experts 64 --types q4_k_m -o "$MODEL"
    [ -f "$VOCAB" ] && set -- "$@" --vocab-from "$VOCAB"
    echo "bench-pipeline: generating $MODEL: qwen35-mkmodel $*"
    "$BIN/qwen35-mkmodel" "$@"
fi

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

# What batching allows: 1 stage decodes all streams in one step, each of 2
# stages a micro-batch of B; B sequences read the union of their experts,
# so a token costs more weight bytes in the smaller batch. Where decoding
# is bandwidth-bound, 2 stages reach at most 2 x that ratio.
per_token() {   # B: weight bytes per token of a decode step of B sequences
    "$BIN/qwen35-info" --batch "$1" "$MODEL" | awk -v b="$1" '
        b == 1 && /^  total / { v = $2; u = $3 }
        b > 1 && /^  total .* per token$/ { v = $(NF-3); u = $(NF-2); sub(/,$/, "", u) }
        END { m = u == "GB" ? 1e9 : u == "MB" ? 1e6 : 1e3; printf "%.0f", v * m }'
}
PT1=$(per_token "$STREAMS")
PT2=$(per_token "$BATCH")
awk -v a="$PT1" -v b="$PT2" -v s="$STREAMS" -v m="$BATCH" 'BEGIN { if (a > 0 && b > 0)
    printf "bench-pipeline: weight bytes per token: %.2f MB in steps of %d sequences, %.2f MB in steps of %d: bandwidth-bound, 2 stages reach at most %.2fx\n", a / 1e6, s, b / 1e6, m, 2 * a / b }'

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
            --json --seed "$i" --timeout 120000
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
    echo "bench-pipeline: $label: compute per token:$(compute_per_token "$st0" "$st1")"
    # the token record of the last run, for the cross-check below
    # shellcheck disable=SC2086
    cat $OUTS | grep -o '"ids":\[[0-9,]*\]' | sort >"$P35_RUN/ids.$label"
}

p35_stage all "$MODEL" "0:$N_LAYER" --threads 1 --max-seqs "$STREAMS" --max-ctx 256
p35_coord "$MODEL" all -- --max-seqs "$STREAMS" --max-ctx 256
p35_wait_ready 600
run "1 stage x 1 thread"
RATE1=$RATE
p35_stop
p35_clear_logs

p35_stage s0 "$MODEL" "$R0" --threads 1 --max-seqs "$STREAMS" --max-ctx 256
p35_stage s1 "$MODEL" "$R1" --threads 1 --max-seqs "$STREAMS" --max-ctx 256
p35_coord "$MODEL" s0 s1 -- --max-seqs "$STREAMS" --max-ctx 256 --micro-batches "$MICRO"
p35_wait_ready 600
run "2 stages x 1 thread"
RATE2=$RATE
IDLE2=$IDLE

cmp -s "$P35_RUN/ids.1 stage x 1 thread" "$P35_RUN/ids.2 stages x 1 thread" ||
    echo "bench-pipeline: WARNING: the two configurations generated different tokens"
RATIO=$(awk -v a="$RATE2" -v b="$RATE1" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }')
echo "bench-pipeline: result: 1 stage $RATE1 tokens/s, 2 stages $RATE2 tokens/s, ratio ${RATIO}x (target >= 1.6x)"
echo "bench-pipeline: 2 stages while all streams decode:$IDLE2 (target: idle <= 5% of busy)"
