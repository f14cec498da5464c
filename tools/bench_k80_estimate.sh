#!/bin/sh
# make bench-k80-estimate — an ESTIMATE, not a measurement: decode and
# prefill of the 35B-A3B Q4_K_M on 4 Tesla K80 dies (one stage per die,
# the CUDA backend), predicted by running the real coordinator over 4
# SIMULATED stages (qwen35-stage --backend sim) whose step times come from
# a K80 timing model of this backend's kernels. No GPU is used.
#
# 1. The plan: qwen35-info MODEL --plan 4 --backend cuda --max-ctx CTX
#    --device-mem 11.5G (printed: weights, slots x positions per die).
# 2. The timing model of one die, per layer kind (bytes from qwen35-info:
#    a layer's dense part D and one expert's bytes e; multiply-adds per row
#    from the config), for a step of R rows:
#      memory  (D + e * X(1 - (1 - k/X)^R)) / BW      (the distinct experts
#              the rows route to; + the KV cache read by attention)
#      compute R * MACs / RATE                        (+ attention's MACs)
#      step    max(memory, compute) + KERNELS * KERNEL_US
#    BW: 150 GB/s (measured per die) and 240 GB/s (the datasheet's).
#    RATE: multiply-adds per second the matmul sustains. Hardware
#    assumption: k_mm loads 4 bytes of activations per multiply-add (one
#    float per weight value, from the read-only cache: cuda/matmul.cu), and
#    a GK210 SMX returns about 128 bytes a clock from it: 32 MAC a clock x
#    13 SMX x 824 MHz = 343 GMAC/s, about 16% of the FP32 FMA peak.
#    The LM head: its bytes / BW (one logits row per sequence).
#    Each stage step adds STEP_US (metadata in, rows out, sync).
# 3. Two sim profiles per bandwidth, each the timing model's line through
#    the steps the table runs (FIXED + ROW x rows; SEQ 0): decode steps of
#    1 and 4 rows, and prefill steps of 1 and 128 rows (the coordinator's
#    chunk), written to build/k80-estimate/.
# 4. The pipeline: decode streams of 64 tokens (1, 4, 16 concurrent: the
#    coordinator forms 4 micro-batches, so 16 streams run 4 per step) and
#    one prompt of PROMPT tokens (time to its first token = its prefill).
# The fork that runs this model on K80s today, for comparison: about 22.5
# tok/s decode on 3-4 dies, about 86 tok/s prefill, 340 s for a 7.8K
# prompt (23 tok/s).
#
# Env: BENCH_MODEL (default: BENCH_PRESET=35b-a3b's file via
# tools/bench_preset.sh), K80_BW ("150 240"), K80_GMACS (343), K80_KERNEL_US
# (5), K80_KERNELS (18 kernels a layer), K80_STEP_US (150), K80_CTX
# (262144: the plan's context), K80_DECODE_CTX (1024: positions the decode
# streams' attention reads), K80_PROMPT (7800), K80_STREAMS ("1 4 16"),
# BENCH_SIM_WRAP (default "chrt -r 10" where allowed).
set -eu
P35_ME=bench-k80-estimate
. "$(dirname "$0")/../client/pipeline.sh"

BUILD=${QWEN35_BUILD:-build}
GOLDEN=${QWEN35_GOLDEN:-../shared/golden}
OUT=$BUILD/k80-estimate
BWS=${K80_BW:-150 240}
GMACS=${K80_GMACS:-343}
KUS=${K80_KERNEL_US:-5}
NK=${K80_KERNELS:-18}
STEPUS=${K80_STEP_US:-150}
CTX=${K80_CTX:-262144}
DCTX=${K80_DECODE_CTX:-1024}
PROMPT=${K80_PROMPT:-7800}
STREAMS=${K80_STREAMS:-1 4 16}
TOKENS=64
CHUNK=128        # coordinator/coord_int.h COORD_PREFILL_CHUNK: prefill rows per step
mkdir -p "$OUT"
# simulated steps are sleeps: real-time scheduling (where allowed) keeps
# other work on this machine out of their wake-ups (as bench-pipeline-sim)
if chrt -r 10 true 2>/dev/null; then P35_WRAP=${BENCH_SIM_WRAP-chrt -r 10}; else P35_WRAP=${BENCH_SIM_WRAP-}; fi

MODEL=${BENCH_MODEL:-}
if [ -z "$MODEL" ]; then
    MODEL=$(sh tools/bench_preset.sh 35b-a3b "$BIN" "$GOLDEN") || { rc=$?; [ $rc -eq 3 ] && exit 0; exit $rc; }
fi
"$BIN/qwen35-info" "$MODEL" > "$OUT/info.txt" || p35_die "qwen35-info $MODEL failed"
"$BIN/qwen35-info" "$MODEL" --plan 4 --backend cuda --max-ctx "$CTX" --device-mem 11.5G > "$OUT/plan.txt" ||
    p35_die "qwen35-info --plan 4 failed: $(cat "$OUT/plan.txt")"
RANGES=$(sed -n 's/^#   stage [0-9]*: layers \([0-9]*:[0-9]*\) .*/\1/p' "$OUT/plan.txt" | tr '\n' ' ')
[ "$(echo $RANGES | wc -w)" = 4 ] || p35_die "no 4-stage plan in $OUT/plan.txt"

# profile BW decode|prefill: the sim profile on stdout, the timing
# model's own figures in its comments (microseconds)
profile() {
    awk -v bw="$1" -v mode="$2" -v rate="$GMACS" -v kus="$KUS" -v nk="$NK" -v stepus="$STEPUS" -v dctx="$DCTX" \
        -v prompt="$PROMPT" -v P=$CHUNK '
        function bytes(v, u) { return v * (u == "GB" ? 1e9 : u == "MB" ? 1e6 : u == "kB" ? 1e3 : 1) }
        /^  embedding / && $2 != "row" { E = $2 + 0; V = $4 + 0 }
        /^  attention / { nh = $2 + 0; nkv = $5 + 0; hd = $10 + 0 }
        /^  moe / { X = $2 + 0; K = $4 + 0; F = $7 + 0; Fs = $10 + 0 }
        /^  ssm / { dk = $3 + 0; nkh = $4 + 0; nv = $6 + 0; inner = $11 + 0 }
        /^  layer  kind/ { inl = 1; next }
        inl && NF == 6 && ($2 == "ssm" || $2 == "attn") {
            st = bytes($3, $4); rd = bytes($5, $6); e = (st - rd) / (X - K)
            n[$2]++; ex[$2] += e; dn[$2] += rd - K * e; next }
        { inl = 0 }
        /^  output / { hb = bytes($2, $3) }
        function dist(r) { return X * (1 - (1 - K / X) ^ r) }
        # one layer of kind k, a step of r rows each reading c cache positions
        function step(k, r, c,   mem, comp, kv) {
            kv = k == "attn" ? r * c * nkv * 2 * hd * 4 : 0
            mem = (D[k] + e1[k] * dist(r) + kv) / (bw * 1e9)
            comp = r * (mac[k] + (k == "attn" ? c * nh * hd * 2 : 0)) / (rate * 1e9)
            return 1e6 * (mem > comp ? mem : comp) + nk * kus + stepus / 10 }
        function head(r,   m, c) { m = hb / (bw * 1e9); c = r * E * V / (rate * 1e9)
                                   return 1e6 * (m > c ? m : c) + 3 * kus }
        END {
            if (!n["ssm"] || !n["attn"] || !E || !X || !hb) { print "profile: cannot read the model from qwen35-info" > "/dev/stderr"; exit 1 }
            kd = dk * nkh; cc = 2 * kd + inner
            ffn = E * X + K * 3 * E * F + 3 * E * Fs + E
            mac["ssm"] = E * cc + E * inner + 2 * E * nv + inner * E + ffn
            mac["attn"] = E * 2 * hd * nh + 2 * E * hd * nkv + hd * nh * E + ffn
            for (k in n) { e1[k] = ex[k] / n[k]; D[k] = dn[k] / n[k] }
            printf "# K80 die (GK210) timing model for qwen35-stage --backend sim: an ESTIMATE, written by\n"
            printf "# tools/bench_k80_estimate.sh: %s GB/s, %s GMAC/s, %s kernels x %s us a layer, %s us a\n", bw, rate, nk, kus, stepus
            printf "# stage step (a tenth to each layer); decode attention reads %d positions, prefill\n", dctx
            printf "# rows the mean of a %d-token prompt. For %s: the line through its steps of 1 and %d rows\n",
                   prompt, mode, mode == "decode" ? 4 : P
            printf "name k80-est-%sGBs-%s\n", bw, mode
            split("ssm attn", kinds, " ")
            for (i = 1; i <= 2; i++) {
                k = kinds[i]
                c = mode == "decode" ? dctx : prompt / 2; r = mode == "decode" ? 4 : P
                a1 = step(k, 1, c); ar = step(k, r, c); row = (ar - a1) / (r - 1)
                printf "#   %s: dense %.1f MB, an expert %.2f MB, %.1f M MAC a row; model %.0f us (1 row), %.0f (%d rows)\n",
                       k, D[k] / 1e6, e1[k] / 1e6, mac[k] / 1e6, a1, ar, r
                printf "%s %.1f %.2f 0\n", k, a1 - row, row }
            h1 = head(1); h4 = head(4)
            printf "#   head: %.1f MB, %.0f M MAC a logits row; model %.0f us (1 row), %.0f (4)\n", hb / 1e6, E * V / 1e6, h1, h4
            printf "embd 20 1\nhead %.1f %.1f\n", h1 - (h4 - h1) / 3, (h4 - h1) / 3 }
        ' "$OUT/info.txt"
}

SIMMODEL=$MODEL   # the sim stages map it (its layer kinds, its context length) but read no weight
SCTX=$((PROMPT + TOKENS + 64))

p35_init
for i in $(seq 1 16); do
    awk -v s="$i" 'BEGIN { srand(s); for (k = 0; k < 12; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
        >"$P35_RUN/p$i.ids"
done
awk -v n="$PROMPT" 'BEGIN { srand(7); for (k = 0; k < n; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
    >"$P35_RUN/long.ids"

# up PROFILE: the 4 simulated stages and the coordinator
up() {
    k=0
    names=""
    for r in $RANGES; do
        p35_stage "d$k" "$SIMMODEL" "$r" --backend sim --sim-profile "$1" --max-seqs 16 --max-ctx $SCTX
        names="$names d$k"
        k=$((k + 1))
    done
    # shellcheck disable=SC2086
    p35_coord "$SIMMODEL" $names -- --max-seqs 16 --max-ctx $SCTX
    p35_wait_ready 60
}

# run BW: "DEC1 DEC4 DEC16 ... PREFILL_S": aggregate decode tok/s per
# stream count (the decode profile), then the long prompt's time to its
# first token (the prefill profile)
run() {
    up "$OUT/k80-$1-decode.profile"
    res=""
    for S in $STREAMS; do
        pids=""
        outs=""
        for i in $(seq 1 "$S"); do
            p35_bg_client "$P35_RUN/o$i" --prompt-ids "$P35_RUN/p$i.ids" -n $TOKENS --ignore-eos --json --seed "$i" \
                --timeout 600000
            pids="$pids $P35_LAST"
            outs="$outs $P35_RUN/o$i"
        done
        for p in $pids; do wait "$p" || p35_die "$S streams: a stream failed: $(cat "$P35_RUN"/o*.err)"; done
        # shellcheck disable=SC2086
        res="$res $(awk '/"event":"final"/ { s = $0; sub(/.*"decode_tps":/, "", s); t += s + 0 } END { printf "%.1f", t }' $outs)"
    done
    p35_stop
    p35_clear_logs
    up "$OUT/k80-$1-prefill.profile"
    p35_client --prompt-ids "$P35_RUN/long.ids" -n 1 --json --timeout 3600000 >"$P35_RUN/long.out" 2>"$P35_RUN/long.err" ||
        p35_die "the $PROMPT-token prompt failed: $(cat "$P35_RUN/long.err")"
    res="$res $(awk '/"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); printf "%.6f", s + 0 }' "$P35_RUN/long.out")"
    p35_stop
    p35_clear_logs
    echo "$res"
}

echo "bench-k80-estimate: an ESTIMATE (simulated K80 dies: the real coordinator, stages that take the"
echo "  timing model's time; no GPU): the 35B-A3B Q4_K_M ($MODEL) on 4 dies, layers $RANGES"
sed -n '/^# memory per stage/,/^#   (the model was trained/p' "$OUT/plan.txt"
hdr="bandwidth"
for S in $STREAMS; do hdr="$hdr | decode $S stream$( [ "$S" = 1 ] || echo s)"; done
echo
echo "$hdr | prefill ($PROMPT-token prompt)"
for bw in $BWS; do
    for mode in decode prefill; do
        profile "$bw" $mode > "$OUT/k80-$bw-$mode.profile" || p35_die "profile for $bw GB/s failed"
    done
    res=$(run "$bw") || exit 1
    # shellcheck disable=SC2086
    set -- $res
    line="$bw GB/s"
    for S in $STREAMS; do line="$line | $1 tok/s"; shift; done
    echo "$line | $(awk -v t="$1" -v n="$PROMPT" 'BEGIN { printf "%.3g s, %.0f tok/s", t, (t > 0 ? n / t : 0) }')"
done
echo "fork on K80s today (measured there) | about 22.5 tok/s on 3-4 dies | | | about 86 tok/s; 340 s for 7.8K (23 tok/s)"
echo "bench-k80-estimate: profiles and the timing model's figures: $OUT/k80-*.profile; the plan: $OUT/plan.txt"
