#!/bin/sh
# make bench-stall — a decode stream while a long prompt prefills, on REAL
# CPU stages: the make bench model (mini: 4 layers of the 35B-A3B's sizes,
# 64 experts) served by 2 stages x 1 thread (layers 0:2 and 2:4), the
# coordinator at --step-target-ms BENCH_STALL_TARGET_MS (default 150: a
# few tens of rows a step here). One stream decodes; once it has 10 tokens
# a BENCH_STALL_PROMPT-token prompt (default 2048) comes. Prints the
# stream's gap between tokens before the prompt and the largest while it
# prefills, in step targets (issue #28: at most 2), and the prompt's TTFT
# beside the stream and alone (a fresh chain each, the same target).
# bench-prefill-sim measures the same on 4 simulated dies.
#
# Env: BIN, QWEN35_GOLDEN, BENCH_MODEL (another file), BENCH_STALL_TARGET_MS,
# BENCH_STALL_PROMPT, BENCH_THREADS (1 a stage), BENCH_ACTIVATIONS (exact),
# BENCH_STALL_TRACE (a file for the coordinator's --trace of the run with
# the stream).
set -eu
P35_ME=bench-stall
. "$(dirname "$0")/pipeline.sh"

p35_bench_model
ST=${BENCH_STALL_TARGET_MS:-150}
P=${BENCH_STALL_PROMPT:-2048}
TH=${BENCH_THREADS:-1}
ACT=${BENCH_ACTIVATIONS:-exact}
CTX=$((P + 1024))
H=$((N_LAYER / 2))

p35_init
awk -v n="$P" 'BEGIN { srand(7); for (k = 0; k < n; k++) printf "%d ", 1 + int(rand() * 400); print "" }' >"$P35_RUN/p.ids"
echo "5 6 7" >"$P35_RUN/short.ids"
chain() {
    p35_stage s0 "$MODEL" "0:$H" --threads "$TH" --activations "$ACT" --max-seqs 2 --max-ctx $CTX
    p35_stage s1 "$MODEL" "$H:$N_LAYER" --threads "$TH" --activations "$ACT" --max-seqs 2 --max-ctx $CTX
    p35_coord "$MODEL" s0 s1 -- --max-seqs 2 --max-ctx $CTX --step-target-ms "$ST" "$@"
    p35_wait_ready 120
}

echo "bench-stall: $(basename "$MODEL"), 2 CPU stages x $TH thread (0:$H, $H:$N_LAYER), --activations $ACT, step target $ST ms; load average $(cut -d' ' -f1-3 /proc/loadavg)"
chain
p35_client --prompt-ids "$P35_RUN/p.ids" -n 1 --ignore-eos --json --timeout 900000 >"$P35_RUN/alone.json" ||
    p35_die "the prompt alone failed"
p35_stop
p35_clear_logs
if [ -n "${BENCH_STALL_TRACE:-}" ]; then chain --trace "$P35_RUN/stall.trace"; else chain; fi
p35_stall_beside "$P35_RUN/short.ids" "$P35_RUN/p.ids" 10 1200
[ -n "${BENCH_STALL_TRACE:-}" ] && cp "$P35_RUN/stall.trace" "$BENCH_STALL_TRACE"
p35_stall_report "2 CPU stages" "$ST" "$P" "$P35_RUN/alone.json"
