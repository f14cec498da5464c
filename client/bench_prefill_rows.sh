#!/bin/sh
# make bench-prefill-rows — one long prompt's time to first token on REAL
# CPU stages, by the rows a step holds: the make bench model (mini: 4
# layers of the 35B-A3B's sizes, 64 experts) served by 1 stage and by 2
# stages x 1 thread, the BENCH_PREFILL_PROMPT-token prompt (default 2048)
# alone in the chain,
# at each stage --step-rows / coordinator --prefill-chunk pair of
# BENCH_PREFILL_ROWS (default "256/128 512/512 2048/2048"; the first is the
# default; "step-rows / chunk" in the table). Larger chunks read each
# routed expert's weights once for more rows; smaller ones keep both stages
# of a chain busy (prefill pipelining). Beside it, in the same run, qwen35-run on one process (1 thread,
# its own pass rows) over the same prompt: the single-process engine's
# prefill, which a 2-stage chain of 1 thread each can beat by pipelining.
#
# Env: BIN, QWEN35_GOLDEN, BENCH_MODEL (another file), BENCH_PREFILL_PROMPT,
# BENCH_PREFILL_ROWS, BENCH_ACTIVATIONS (exact).
set -eu
P35_ME=bench-prefill-rows
. "$(dirname "$0")/pipeline.sh"

p35_bench_model
P=${BENCH_PREFILL_PROMPT:-2048}
ROWS=${BENCH_PREFILL_ROWS:-256/128 512/512 2048/2048}
ACT=${BENCH_ACTIVATIONS:-exact}
CTX=$((P + 64))
H=$((N_LAYER / 2))

p35_init
awk -v n="$P" 'BEGIN { srand(7); for (k = 0; k < n; k++) printf "%d ", 1 + int(rand() * 400); print "" }' >"$P35_RUN/p.ids"
ttft() { awk '/"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); printf "%.2f", s + 0 }' "$1"; }

echo "bench-prefill-rows: $(basename "$MODEL"), a $P-token prompt, 1 and 2 CPU stages x 1 thread, --activations $ACT; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN/qwen35-run" -m "$MODEL" -t 1 --activations "$ACT" --tokens "$P35_RUN/p.ids" -n 1 --ctx-size $CTX \
    >"$P35_RUN/run.out" 2>"$P35_RUN/run.err" || p35_die "qwen35-run failed: $(tail -n 3 "$P35_RUN/run.err")"
# its prefill line: "prefill N tokens in S s (...)"
single=$(sed -n 's/.*prefill [0-9]* tokens in \([0-9.]*\) s.*/\1/p' "$P35_RUN/run.err")
[ -n "$single" ] || p35_die "qwen35-run printed no prefill time: $(cat "$P35_RUN/run.err")"
printf '%-28s %9s %9s %9s\n' "setup" "ttft s" "tok/s" "vs run"
printf '%-28s %9s %9.1f %9s\n' "qwen35-run, 1 thread" "$single" "$(awk -v p="$P" -v t="$single" 'BEGIN { print p / t }')" "1.00x"
# chain NSTAGES ROWS CHUNK: the prompt's TTFT on a fresh chain of NSTAGES
# stages (1: all layers on one) at --step-rows ROWS, --prefill-chunk CHUNK
chain() {
    if [ "$1" -eq 1 ]; then
        p35_stage s0 "$MODEL" "0:$N_LAYER" --threads 1 --activations "$ACT" --max-seqs 2 --max-ctx $CTX --step-rows "$2"
        p35_coord "$MODEL" s0 -- --max-seqs 2 --max-ctx $CTX --prefill-chunk "$3"
    else
        p35_stage s0 "$MODEL" "0:$H" --threads 1 --activations "$ACT" --max-seqs 2 --max-ctx $CTX --step-rows "$2"
        p35_stage s1 "$MODEL" "$H:$N_LAYER" --threads 1 --activations "$ACT" --max-seqs 2 --max-ctx $CTX --step-rows "$2"
        p35_coord "$MODEL" s0 s1 -- --max-seqs 2 --max-ctx $CTX --prefill-chunk "$3"
    fi
    p35_wait_ready 120
    p35_client --prompt-ids "$P35_RUN/p.ids" -n 1 --ignore-eos --json --timeout 900000 >"$P35_RUN/c.json" ||
        p35_die "$1 stages, step-rows $2, prefill-chunk $3: the prompt failed"
    p35_stop
    p35_clear_logs
    ttft "$P35_RUN/c.json"
}
for ns in 1 2; do
    for rc in $ROWS; do
        sr=${rc%/*}
        pc=${rc#*/}
        t=$(chain "$ns" "$sr" "$pc")
        printf '%-28s %9s %9.1f %8.2fx\n' "$ns x 1 thread, $sr / $pc" "$t" "$(awk -v p="$P" -v t="$t" 'BEGIN { print p / t }')" \
            "$(awk -v s="$single" -v t="$t" 'BEGIN { print s / t }')"
    done
done
