#!/bin/sh
# make bench-prefill-sim — time to first token of one long prompt on 1, 2,
# 4 and 8 SIMULATED dies (qwen35-stage --backend sim, the K80 35B-A3B
# profile with every time divided by BENCH_SIM_SCALE, default 10, so a run
# takes minutes), with the prompt's chunks pipelined across the stages
# (the coordinator's default) and without (--no-prefill-pipeline: the next
# chunk waits for the last stage), both in the same run; the prefix cache
# off and on (its checkpoints every 1024 tokens drain the pipeline).
#
# Speed-up = TTFT on 1 die (all 40 layers) / TTFT on N dies. The target
# (issue #28): >= 0.8 x N at 4 dies, pipelined. The stages compute nothing:
# the coordinator, the wire and the scheduler are the real ones.
#
# Env: BIN, BENCH_SIM_PROFILE, BENCH_SIM_SCALE (10), BENCH_SIM_DIES
# ("1 2 4 8"), BENCH_PROMPTS ("2048 8192"), BENCH_STEP_TARGET_MS (0: the
# coordinator's default chunks), BENCH_SIM_WRAP; the decode stall at the
# end: BENCH_STALL_TARGET_MS (20), BENCH_STALL_PROMPT (2048),
# BENCH_STALL_TRACE (a file for its --trace), BENCH_STALL_ONLY=1 (only it).
set -eu
P35_ME=bench-prefill-sim
. "$(dirname "$0")/pipeline.sh"

BUILD=${QWEN35_BUILD:-build}
PROFILE=${BENCH_SIM_PROFILE:-deploy/examples/sim/k80-35b-a3b.profile}
SCALE=${BENCH_SIM_SCALE:-10}
DIES=${BENCH_SIM_DIES:-1 2 4 8}
PROMPTS=${BENCH_PROMPTS:-2048 8192}
TARGET=${BENCH_STEP_TARGET_MS:-0}
MODEL=$BUILD/models/sim-40L.gguf
N_LAYER=40
if chrt -r 10 true 2>/dev/null; then P35_WRAP=${BENCH_SIM_WRAP-chrt -r 10}; else P35_WRAP=${BENCH_SIM_WRAP-}; fi
[ -f "$PROFILE" ] || p35_die "$PROFILE: no such profile (BENCH_SIM_PROFILE)"
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/qwen35-mkmodel" --preset tiny --layers $N_LAYER --experts 4 --ctx 16384 -o "$MODEL" >/dev/null ||
        p35_die "qwen35-mkmodel failed"
fi

p35_init
# the profile, every microsecond figure divided by SCALE
awk -v s="$SCALE" '/^[ \t]*#/ || $1 == "name" || $1 == "mixer" { print; next }
                   { printf "%s", $1; for (i = 2; i <= NF; i++) printf " %g", $i / s; print "" }' \
    "$PROFILE" >"$P35_RUN/sim.profile"
MAXP=0
for p in $PROMPTS; do [ "$p" -gt "$MAXP" ] && MAXP=$p; done
CTX=$((MAXP + 64))
for p in $PROMPTS; do
    awk -v n="$p" 'BEGIN { srand(7); for (k = 0; k < n; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
        >"$P35_RUN/p$p.ids"
done

# ttft N PROMPT COORD_OPTS...: one request's time to first token (s)
ttft() {
    _n=$1 _p=$2
    shift 2
    names=""
    k=0
    while [ $k -lt "$_n" ]; do
        a=$((N_LAYER * k / _n)) b=$((N_LAYER * (k + 1) / _n))
        p35_stage "d$k" "$MODEL" "$a:$b" --backend sim --sim-profile "$P35_RUN/sim.profile" --max-seqs 2 \
            --max-ctx $CTX
        names="$names d$k"
        k=$((k + 1))
    done
    # shellcheck disable=SC2086
    p35_coord "$MODEL" $names -- --max-seqs 2 --max-ctx $CTX --step-target-ms "$TARGET" "$@"
    p35_wait_ready 60
    p35_client --prompt-ids "$P35_RUN/p$_p.ids" -n 1 --ignore-eos --json --timeout 900000 >"$P35_RUN/o.json" ||
        p35_die "$_n dies, $_p tokens: the request failed"
    awk '/"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); printf "%.3f", s + 0 }' "$P35_RUN/o.json"
    p35_stop
}

echo "bench-prefill-sim: SIMULATED dies ($(sed -n 's/^name *//p' "$PROFILE") / $SCALE), one prompt; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-7s %-5s %-6s %10s %10s %8s %10s %8s %9s\n' prompt dies cache "ttft_off_s" "ttft_on_s" "on/off" "speedup" "x/dies" "target"
[ "${BENCH_STALL_ONLY:-0}" = 1 ] && PROMPTS=""
for p in $PROMPTS; do
    for cache in off on; do
        set --
        [ $cache = off ] && set -- --prefix-cache off
        base=""
        for N in $DIES; do
            off=$(ttft "$N" "$p" "$@" --no-prefill-pipeline)
            on=$(ttft "$N" "$p" "$@")
            [ -z "$base" ] && base=$on
            awk -v p="$p" -v n="$N" -v c="$cache" -v a="$off" -v b="$on" -v z="$base" 'BEGIN {
                sp = z / b; t = n == 4 ? (sp >= 0.8 * n ? "met" : "MISSED") : ""
                printf "%-7s %-5s %-6s %10.3f %10.3f %7.2fx %9.2fx %8.2f %9s\n", p, n, c, a, b, a / b, sp, sp / n, t }'
        done
    done
done

# A decode stream while a long prompt prefills (4 dies, --step-target-ms
# BENCH_STALL_TARGET_MS, default 20, a BENCH_STALL_PROMPT-token prompt,
# default 2048): the stream's largest gap between tokens while the prompt
# is in flight, in step targets (the target, issue #28: no decode stream
# stalled longer than 2), against its gap before; and the prompt's TTFT
# beside the stream and alone (a fresh coordinator each, the same target).
# BENCH_STALL_TRACE=FILE keeps the coordinator's --trace of the run with
# the stream.
ST=${BENCH_STALL_TARGET_MS:-20}
P=${BENCH_STALL_PROMPT:-2048}
[ -f "$P35_RUN/p$P.ids" ] ||
    awk -v n="$P" 'BEGIN { srand(7); for (k = 0; k < n; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
        >"$P35_RUN/p$P.ids"
[ "$P" -gt "$MAXP" ] && CTX=$((P + 64))
echo "5 6 7" >"$P35_RUN/short.ids"
# stall_chain [coordinator options]: 4 stages and a coordinator, ready
stall_chain() {
    names=""
    for k in 0 1 2 3; do
        p35_stage "d$k" "$MODEL" "$((10 * k)):$((10 * k + 10))" --backend sim --sim-profile "$P35_RUN/sim.profile" \
            --max-seqs 2 --max-ctx $CTX
        names="$names d$k"
    done
    # shellcheck disable=SC2086
    p35_coord "$MODEL" $names -- --max-seqs 2 --max-ctx $CTX --step-target-ms "$ST" "$@"
    p35_wait_ready 60
}
stall_chain
p35_client --prompt-ids "$P35_RUN/p$P.ids" -n 1 --ignore-eos --json --timeout 900000 >"$P35_RUN/alone.json" ||
    p35_die "the long prompt alone failed"
p35_stop
if [ -n "${BENCH_STALL_TRACE:-}" ]; then stall_chain --trace "$P35_RUN/stall.trace"; else stall_chain; fi
p35_stall_beside "$P35_RUN/short.ids" "$P35_RUN/p$P.ids" 20 600
[ -n "${BENCH_STALL_TRACE:-}" ] && cp "$P35_RUN/stall.trace" "$BENCH_STALL_TRACE"
p35_stall_report "4 dies" "$ST" "$P" "$P35_RUN/alone.json"
