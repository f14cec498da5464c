#!/bin/sh
# make bench-hosts — the pipeline across simulated hosts (tests/hosts.sh:
# one network namespace a host, veth links through a switch namespace,
# tbf rate limits, RTT by tc netem or, without sch_netem, by
# qwen35-netrelay; TCP with CURVE), next to the same daemons on loopback.
#
# 1. Real CPU stages (the golden tiny Q8_0 model, 2 hosts, RTT
#    BENCH_HOSTS_DTYPE_RTT ms): for each wire dtype (f32, f16, bf16) the
#    greedy ids against expect/tiny-Q8_0.greedy.txt, the 64 prompt
#    positions' logits against expect/tiny-Q8_0.logits.f32 (the golden
#    tolerance: 1e-3) and the bytes on the wire per decoded token per hop.
# 2. SIMULATED stages (qwen35-stage --backend sim, BENCH_HOSTS_PROFILE; a
#    40-layer model with the tiny preset's n_embd, split evenly) for every
#    (hosts, RTT, rate): aggregate decode tokens/s at 1, 4 and 16 streams
#    (the sum of the streams' decode_tps, BENCH_TOKENS tokens each),
#    TTFT of one BENCH_HOSTS_PROMPT-token prompt, bytes on the wire per
#    token per hop (host 1's link, both ways, IP headers included, over the
#    16-stream run: prompt and decode), and as a share of the loopback
#    run's figures. TTFT also for 1 host (the whole model on one stage).
#
# Env: BIN, BENCH_HOSTS_N ("2 4"), BENCH_HOSTS_RTT ("0.1 1 5 20"),
# BENCH_HOSTS_RATE ("1gbit 10gbit"), BENCH_HOSTS_STREAMS ("1 4 16"),
# BENCH_TOKENS (32), BENCH_HOSTS_PROMPT (2000), BENCH_HOSTS_DTYPE (the
# sim runs' --wire-dtype, default f32), BENCH_HOSTS_REAL=0 (skip part 1),
# BENCH_HOSTS_PROFILE (deploy/examples/sim/k80x8-35b-a3b.profile),
# BENCH_COORD_OPTS (more coordinator options); HOSTS_* as tests/hosts.sh
# (HOSTS_FORCE_RELAY=1, HOSTS_JITTER_MS, HOSTS_LOSS).
set -eu
P35_ME=bench-hosts
. "$(dirname "$0")/pipeline.sh"
. "$(dirname "$0")/../tests/hosts.sh"

BUILD=${QWEN35_BUILD:-build}
G=${QWEN35_GOLDEN:-$(cd "$(dirname "$0")/../.." && pwd)/shared/golden}
PROFILE=${BENCH_HOSTS_PROFILE:-deploy/examples/sim/k80x8-35b-a3b.profile}
NS_LIST=${BENCH_HOSTS_N:-2 4}
RTTS=${BENCH_HOSTS_RTT:-0.1 1 5 20}
RATES=${BENCH_HOSTS_RATE:-1gbit 10gbit}
STREAMS_LIST=${BENCH_HOSTS_STREAMS:-1 4 16}
TOKENS=${BENCH_TOKENS:-32}
PLEN=${BENCH_HOSTS_PROMPT:-2000}
DTYPE=${BENCH_HOSTS_DTYPE:-f32}
MODEL=$BUILD/models/sim-40L.gguf
N_LAYER=40
MAXS=16
CTX=$((PLEN + 256))
[ -f "$PROFILE" ] || p35_die "$PROFILE: no such profile (BENCH_HOSTS_PROFILE)"
p35_init
hosts_need
if [ ! -f "$MODEL" ]; then
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/qwen35-mkmodel" --preset tiny --layers $N_LAYER --experts 4 -o "$MODEL" >/dev/null ||
        p35_die "qwen35-mkmodel failed"
fi
for i in $(seq 1 $MAXS); do
    awk -v s="$i" 'BEGIN { srand(s); for (k = 0; k < 12; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
        >"$P35_RUN/p$i.ids"
done
awk -v n="$PLEN" 'BEGIN { srand(99); for (k = 0; k < n; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
    >"$P35_RUN/long.ids"

# ready: the chain up within 60 s, or the run stops naming the logs
ready() { p35_wait_ready 60; }
# down: every daemon stopped and the namespaces gone (a fresh set per run)
down() {
    p35_stop
    hosts_down
    p35_clear_logs
    HOSTS_PORT=5800
}
# net K RTT RATE: K stage hosts with these links (lo: loopback, no namespaces)
net() {
    HOSTS_RTT_MS=$2 HOSTS_RATE=$3
    [ "$1" = lo ] || hosts_init "$1" >"$P35_RUN/hosts.txt"
}
where() { [ "$1" = lo ] && echo lo || echo "$2"; }

# ---- 1. wire dtypes on real CPU stages ----------------------------------
if [ "${BENCH_HOSTS_REAL:-1}" = 1 ]; then
    RM=$G/models/tiny-Q8_0.gguf
    GOLD=$(tr -s ' \n' ' ' <"$G/expect/tiny-Q8_0.greedy.txt" | sed 's/ $//;s/^ //')
    DRTT=${BENCH_HOSTS_DTYPE_RTT:-1}
    echo "bench-hosts: 1. real CPU stages (tiny Q8_0, layers 0:4 on host 1, 4:8 on host 2), RTT $DRTT ms, 1gbit:"
    printf '  %-6s %-14s %-16s %-14s %s\n' dtype greedy "logits max|d|" "golden 1e-3" "wire bytes/token/hop (64 decoded)"
    for dt in f32 f16 bf16; do
        net 2 "$DRTT" 1gbit
        [ "$dt" = f32 ] && sed 's/^/  /' "$P35_RUN/hosts.txt"
        hosts_stage s0 1 "$RM" 0:4 --threads 1 --max-seqs 4 --max-ctx 512
        hosts_stage s1 2 "$RM" 4:8 --threads 1 --max-seqs 4 --max-ctx 512
        hosts_coord "$RM" s0 s1 -- --max-seqs 4 --max-ctx 512 --wire-dtype "$dt"
        ready
        got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 30000)
        p35_client --prompt-ids "$G/tokens64.txt" -n 1 --ignore-eos --ids --logits-out "$P35_RUN/l.f32" >/dev/null
        d=$(p35_maxdiff "$P35_RUN/l.f32" "$G/expect/tiny-Q8_0.logits.f32" $((64 * 512)))
        # decode bytes: a 64-token run less a 1-token run of the same prompt
        b0=$(hosts_wire_bytes 1)
        p35_client --prompt-ids "$G/tokens64.txt" -n 1 --ignore-eos --ids >/dev/null
        b1=$(hosts_wire_bytes 1)
        p35_client --prompt-ids "$G/tokens64.txt" -n 65 --ignore-eos --ids >/dev/null
        b2=$(hosts_wire_bytes 1)
        per=$(( ((b2 - b1) - (b1 - b0)) / 64 ))
        tol=$(awk -v d="$d" 'BEGIN { print (d != "bad" && d <= 0.001) ? "within" : "OUTSIDE" }')
        printf '  %-6s %-14s %-16s %-14s %s\n' "$dt" "$([ "$got" = "$GOLD" ] && echo exact || echo DIFFERS)" "$d" "$tol" "$per"
        down
    done
fi

# ---- 2. the simulated grid -----------------------------------------------
# ranges N: N even ranges of the 40 layers
ranges() { awk -v n="$1" -v l=$N_LAYER 'BEGIN { for (i = 0; i < n; i++) printf "%d:%d ", int(i * l / n), int((i + 1) * l / n) }'; }
# sim HOSTS-OR-lo N: N sim stages (on hosts 1..N, or loopback) and the coordinator
sim() {
    names="" k=1
    for r in $(ranges "$2"); do
        hosts_stage "d$k" "$(where "$1" $k)" "$MODEL" "$r" --backend sim --sim-profile "$PROFILE" \
            --max-seqs $MAXS --max-ctx $CTX
        names="$names d$k"
        k=$((k + 1))
    done
    # shellcheck disable=SC2086
    hosts_coord "$MODEL" $names -- --max-seqs $MAXS --max-ctx $CTX --wire-dtype "$DTYPE" ${BENCH_COORD_OPTS:-}
    ready
}
# decode S: aggregate decode tok/s of S streams (sum of their decode_tps)
decode() {
    pids=""
    for i in $(seq 1 "$1"); do
        p35_bg_client "$P35_RUN/o$i" --prompt-ids "$P35_RUN/p$i.ids" -n "$TOKENS" --ignore-eos --json --seed "$i" \
            --timeout 300000
        pids="$pids $P35_LAST"
    done
    for p in $pids; do wait "$p" || p35_die "a stream failed: $(cat "$P35_RUN"/o*.err)"; done
    for i in $(seq 1 "$1"); do cat "$P35_RUN/o$i"; done |
        awk '/"event":"final"/ { s = $0; sub(/.*"decode_tps":/, "", s); t += s + 0 } END { printf "%.1f", t }'
}
ttft() {
    p35_client --prompt-ids "$P35_RUN/long.ids" -n 1 --ignore-eos --json --timeout 600000 |
        awk '/"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); printf "%.0f", 1000 * s }'
}

ROWS=$P35_RUN/rows
: >"$ROWS"
echo "bench-hosts: 2. SIMULATED stages ($(sed -n 's/^name *//p' "$PROFILE") from $PROFILE; 40 layers, n_embd 256," \
    "hidden rows as $DTYPE), $TOKENS tokens a stream, prompts of 12 tokens; TTFT of a $PLEN-token prompt;" \
    "load average $(cut -d' ' -f1-3 /proc/loadavg)"
run_one() {   # run_one WHERE N RTT RATE
    net "$1" "$3" "$4"
    [ "$1" = lo ] || [ -n "${MECH_SAID:-}" ] || { MECH_SAID=1; sed 's/^/  /' "$P35_RUN/hosts.txt"; }
    sim "$1" "$2"
    line=""
    for s in $STREAMS_LIST; do
        if [ "$1" != lo ] && [ "$s" = "$(echo "$STREAMS_LIST" | awk '{ print $NF }')" ]; then
            b0=$(hosts_wire_bytes 1)
            r=$(decode "$s")
            b1=$(hosts_wire_bytes 1)
            bpt=$(( (b1 - b0) / (s * (TOKENS + 12)) ))
        else
            r=$(decode "$s")
        fi
        line="$line $r"
    done
    t=$(ttft)
    down
    # a file, not $(run_one): hosts_init's EXIT trap must stay in this shell
    echo "$line $t ${bpt:-0}" >"$P35_RUN/res"
}
printf '%-5s %-6s %-7s' hosts rtt_ms rate
for s in $STREAMS_LIST; do printf ' %9s %6s' "tok/s@$s" "%lo"; done
printf ' %8s %6s %s\n' ttft_ms "%lo" "wire B/token/hop"
TT1=""
for N in $NS_LIST; do
    bpt=""
    run_one lo "$N" 0 0
    set -- $(cat "$P35_RUN/res")
    LO="$*"
    printf '%-5s %-6s %-7s' "$N" loop -
    i=1
    for s in $STREAMS_LIST; do eval "printf ' %9s %6s' \"\$$i\" 100"; i=$((i + 1)); done
    eval "printf ' %8s %6s %s\n' \"\$$i\" 100 -"
    for R in $RTTS; do
        for L in $RATES; do
            bpt=""
            run_one "$N" "$N" "$R" "$L"
            set -- $(cat "$P35_RUN/res")
            printf '%-5s %-6s %-7s' "$N" "$R" "$L"
            i=1
            for s in $STREAMS_LIST; do
                eval "v=\$$i; l=\$(echo \"$LO\" | cut -d' ' -f$i)"
                printf ' %9s %6s' "$v" "$(awk -v a="$v" -v b="$l" 'BEGIN { printf "%.1f", (b > 0 ? 100 * a / b : 0) }')"
                i=$((i + 1))
            done
            eval "v=\$$i; w=\$$((i + 1)); l=\$(echo \"$LO\" | cut -d' ' -f$i)"
            printf ' %8s %6s %s\n' "$v" "$(awk -v a="$v" -v b="$l" 'BEGIN { printf "%.1f", (a > 0 ? 100 * b / a : 0) }')" "$w"
            echo "$N $R $L $* | $LO" >>"$ROWS"
        done
    done
done
# TTFT on one host: the whole model on one stage, loopback
names=""
hosts_stage d1 lo "$MODEL" 0:$N_LAYER --backend sim --sim-profile "$PROFILE" --max-seqs $MAXS --max-ctx $CTX
hosts_coord "$MODEL" d1 -- --max-seqs $MAXS --max-ctx $CTX ${BENCH_COORD_OPTS:-}
ready
TT1=$(ttft)
down
echo "bench-hosts: TTFT of the $PLEN-token prompt on 1 host (one stage, loopback): $TT1 ms;" \
    "with more hosts: $(awk '{ printf "%s hosts at %s ms RTT %s: %s ms; ", $1, $2, $3, $(4 + '"$(echo "$STREAMS_LIST" | wc -w)"') }' "$ROWS" | head -c 2000)"
echo "bench-hosts: %lo: tok/s as a share of the same hosts on loopback; for TTFT loopback's TTFT over this one's (100: as fast)."
