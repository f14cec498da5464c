#!/bin/sh
# make bench-pipeline-sim — the scheduler on pipelines this machine cannot
# run: 2, 4 and 8 SIMULATED dies (qwen35-stage --backend sim: each step
# takes the time a timing profile gives, deploy/examples/sim/*.profile;
# default: a K80 die running the 35B-A3B), 1–64 concurrent streams.
# Everything here is a SIMULATION: the stages compute nothing, the
# coordinator, the wire and the scheduler are the real ones.
#
# For every (dies N, streams S): aggregate decode tokens/s, the ideal (the
# timing model's rate with every stage busy all the time: N x one die's
# rate when the pipeline is full, for the micro-batch size the coordinator
# forms: M micro-batches of B = ceil(S / M) streams), their ratio, each
# stage's busy share of wall time while every stream decodes (its own
# stats), mean time to first token. With 1 stream: the token interval
# against the sum of the stages' step times (the rest is the hops through
# the coordinator, per hop).
# Targets (N = 4, 8; S >= 2N): aggregate >= 85% of the ideal and every stage
# busy >= 85%; 1 stream: < 1 ms per hop.
# Prints a table; with gnuplot, draws build/bench-pipeline-sim.png
# (throughput vs ideal and the least busy stage's share, against streams).
#
# Env: BIN, BENCH_SIM_PROFILE, BENCH_SIM_DIES ("2 4 8"),
# BENCH_SIM_STREAMS ("1 2 4 8 16 32 64"), BENCH_TOKENS (32),
# BENCH_MICRO_BATCHES (the coordinator's default when unset),
# BENCH_COORD_OPTS (more coordinator options), BENCH_SIM_OUT (the PNG).
set -eu
P35_ME=bench-pipeline-sim
. "$(dirname "$0")/pipeline.sh"

BUILD=${QWEN35_BUILD:-build}
PROFILE=${BENCH_SIM_PROFILE:-deploy/examples/sim/k80-35b-a3b.profile}
DIES=${BENCH_SIM_DIES:-2 4 8}
STREAMS_LIST=${BENCH_SIM_STREAMS:-1 2 4 8 16 32 64}
TOKENS=${BENCH_TOKENS:-32}
MICRO=${BENCH_MICRO_BATCHES:-}
PNG=${BENCH_SIM_OUT:-$BUILD/bench-pipeline-sim.png}
MODEL=$BUILD/models/sim-40L.gguf
N_LAYER=40
MAXS=64
[ -f "$PROFILE" ] || p35_die "$PROFILE: no such profile (BENCH_SIM_PROFILE)"

if [ ! -f "$MODEL" ]; then
    # the layer kinds and sizes of the 35B-A3B's stack; the simulator reads no weights
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/qwen35-mkmodel" --preset tiny --layers $N_LAYER --experts 4 -o "$MODEL" >/dev/null ||
        p35_die "qwen35-mkmodel failed"
fi

# cost FIRST LAST ROWS SEQS: microseconds the profile gives a step of
# layers [FIRST, LAST) (embd with layer 0, head with the last layer).
cost() {
    awk -v a="$1" -v b="$2" -v r="$3" -v s="$4" -v nl=$N_LAYER '
        /^[ \t]*#/ { next }
        $1 == "ssm" || $1 == "attn" { f[$1] = $2; w[$1] = $3; q[$1] = $4 }
        $1 == "embd" || $1 == "head" { f[$1] = $2; w[$1] = $3 }
        END { t = 0
              for (i = a; i < b; i++) { k = (i + 1) % 4 == 0 ? "attn" : "ssm"; t += f[k] + w[k] * r + q[k] * s }
              if (a == 0) t += f["embd"] + w["embd"] * r
              if (b == nl) t += f["head"] + w["head"] * s
              printf "%.1f", t }' "$PROFILE"
}

# split N: N layer ranges "A:B" whose decode steps cost about the same
# (the head counts on the last stage).
split() {
    awk -v n="$1" -v nl=$N_LAYER '
        /^[ \t]*#/ { next }
        $1 == "ssm" || $1 == "attn" { c[$1] = $2 + $3 }
        $1 == "embd" || $1 == "head" { c[$1] = $2 + $3 }
        END { tot = c["embd"] + c["head"]
              for (i = 0; i < nl; i++) { k = (i + 1) % 4 == 0 ? "attn" : "ssm"; lc[i] = c[k]; tot += c[k] }
              lc[0] += c["embd"]; lc[nl - 1] += c["head"]
              a = 0; acc = 0
              for (s = 1; s < n; s++) {
                  goal = tot * s / n
                  b = a + 1
                  while (b < nl - (n - s) && acc + lc[b - 1] + lc[b] / 2 < goal) { acc += lc[b - 1]; b++ }
                  acc += lc[b - 1]
                  printf "%d:%d ", a, b; a = b
              }
              printf "%d:%d\n", a, nl }' "$PROFILE"
}

p35_init
ROWS="$P35_RUN/rows"
: >"$ROWS"
for i in $(seq 1 $MAXS); do
    awk -v s="$i" 'BEGIN { srand(s); for (k = 0; k < 12; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
        >"$P35_RUN/p$i.ids"
done

echo "bench-pipeline-sim: SIMULATED dies ($(sed -n 's/^name *//p' "$PROFILE") from $PROFILE), $TOKENS tokens a stream"
printf '%-5s %-7s %-4s %-5s %9s %9s %7s %8s %8s %s\n' dies streams mb rows tok/s ideal "%ideal" ttft_ms min_busy "busy% per stage"

for N in $DIES; do
    RANGES=$(split "$N")
    names=""
    k=0
    for r in $RANGES; do
        p35_stage "d$k" "$MODEL" "$r" --backend sim --sim-profile "$PROFILE" --max-seqs $MAXS --max-ctx 256
        names="$names d$k"
        k=$((k + 1))
    done
    set -- --max-seqs $MAXS --max-ctx 256
    [ -n "$MICRO" ] && set -- "$@" --micro-batches "$MICRO"
    # shellcheck disable=SC2086
    p35_coord "$MODEL" $names -- "$@" ${BENCH_COORD_OPTS:-}
    p35_wait_ready 60
    M=$(sed -n 's/.*, \([0-9]*\) micro-batches.*/\1/p' "$P35_RUN/coord.log" | tail -n 1)
    [ -n "$M" ] || M=$N
    for S in $STREAMS_LIST; do
        outs=""
        pids=""
        for i in $(seq 1 "$S"); do
            p35_bg_client "$P35_RUN/o$i" --prompt-ids "$P35_RUN/p$i.ids" -n "$TOKENS" --ignore-eos \
                --json --seed "$i" --timeout 300000
            pids="$pids $P35_LAST"
            outs="$outs $P35_RUN/o$i"
        done
        for i in $(seq 1 "$S"); do p35_wait_file "$P35_RUN/o$i" '"event":"piece"' 300 || true; done
        # stage stats from here to the first stream's end (each reply's
        # busy_s and uptime_s are the stage's own, taken together)
        st0=$(p35_client --status --json)
        ts0=$(date +%s.%N)
        t_end=$(( $(date +%s) + 300 ))
        # shellcheck disable=SC2086
        until grep -l '"event":"final"\|"event":"error"' $outs >/dev/null 2>&1; do
            [ "$(date +%s)" -ge "$t_end" ] && break
            sleep 0.05
        done
        st1=$(p35_client --status --json)
        ts1=$(date +%s.%N)
        for p in $pids; do wait "$p" || p35_die "$N dies, $S streams: a stream failed: $(cat "$P35_RUN"/o*.err)"; done
        # shellcheck disable=SC2086
        res=$(awk -F'"t":' '
            /"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); tt += s + 0; nt++ }
            END { printf "%.1f", (nt ? 1000 * tt / nt : 0) }' $outs)
        # aggregate rate while every stream decodes: the coordinator's count
        # of generated tokens between the two snapshots
        rate=$(awk -v a="$(p35_field "$st0" tokens_generated)" -v b="$(p35_field "$st1" tokens_generated)" \
            -v t0="$ts0" -v t1="$ts1" 'BEGIN { printf "%.3f", (t1 > t0 ? (b - a) / (t1 - t0) : 0) }')
        ttft=$res
        # busy share of wall time per stage between the snapshots
        busy=$(printf '%s\n%s\n' "$st0" "$st1" | awk '
            { n = split($0, st, /"endpoint":/)
              for (i = 2; i <= n; i++) {
                  b = st[i]; sub(/.*"busy_s":/, "", b); v[NR, i] = b + 0
                  u = st[i]; sub(/.*"uptime_s":/, "", u); w[NR, i] = u + 0 } }
            END { for (i = 2; i <= n; i++) {
                      d = w[2, i] - w[1, i]
                      if (d < 0.3) printf "n/a "; else printf "%.1f ", 100 * (v[2, i] - v[1, i]) / d } }')
        minb=$(printf '%s\n' "$busy" | awk '{ m = 1e9; for (i = 1; i <= NF; i++) if ($i == "n/a") { print "n/a"; exit } else if ($i < m) m = $i; print m }')
        # the ideal: every stage busy all the time at B rows a step
        mbs=$M
        [ "$S" -lt "$mbs" ] && mbs=$S
        B=$(( (S + M - 1) / M ))
        worst=0
        sum1=0
        for r in $RANGES; do
            c=$(cost "${r%:*}" "${r#*:}" "$B" "$B")
            worst=$(awk -v a="$worst" -v b="$c" 'BEGIN { print (b > a ? b : a) }')
            sum1=$(awk -v a="$sum1" -v b="$(cost "${r%:*}" "${r#*:}" 1 1)" 'BEGIN { print a + b }')
        done
        # with fewer micro-batches than stages the chain cannot fill: each
        # of the S streams' tokens takes the whole chain's time
        ideal=$(awk -v w="$worst" -v b="$B" -v s="$S" -v n="$N" -v mbs="$mbs" \
            'BEGIN { r = 1e6 * b / w; if (mbs < n) r = r * mbs / n; printf "%.3f", r }')
        pct=$(awk -v a="$rate" -v b="$ideal" 'BEGIN { printf "%.1f", (b > 0 ? 100 * a / b : 0) }')
        printf '%-5s %-7s %-4s %-5s %9s %9s %7s %8s %8s %s\n' "$N" "$S" "$M" "$B" "$rate" "$ideal" "$pct" \
            "$ttft" "$minb" "$busy"
        echo "$N $S $rate $ideal $pct $minb $ttft" >>"$ROWS"
        if [ "$S" = 1 ]; then
            awk -v r="$rate" -v s="$sum1" -v n="$N" 'BEGIN { if (r > 0) { iv = 1e6 / r
                printf "      1 stream: a token every %.2f ms; the stages'"'"' steps sum to %.2f ms; %.3f ms per hop (%d hops; target < 1 ms)\n",
                    iv / 1000, s / 1000, (iv - s) / 1000 / n, n } }'
        fi
    done
    p35_stop
    p35_clear_logs
done

echo "bench-pipeline-sim: targets (4 and 8 dies, streams >= 2 x dies): %ideal >= 85 and min_busy >= 85:"
awk '$1 >= 4 && $2 >= 2 * $1 { n++; ok = $5 >= 85 && $6 >= 85; good += ok
        printf "  %d dies, %2d streams: %.1f%% of ideal, least busy stage %.1f%%: %s\n", $1, $2, $5, $6, ok ? "holds" : "MISSED" }
     END { printf "  %d of %d hold\n", good, n }' "$ROWS"

if command -v gnuplot >/dev/null 2>&1; then
    for N in $DIES; do awk -v n="$N" '$1 == n' "$ROWS" >"$P35_RUN/rows.$N"; done
    plots=""
    plots2=""
    for N in $DIES; do
        plots="$plots${plots:+, }'$P35_RUN/rows.$N' using 2:3 with linespoints title '$N dies', '$P35_RUN/rows.$N' using 2:4 with lines dashtype 2 title '$N dies ideal'"
        plots2="$plots2${plots2:+, }'$P35_RUN/rows.$N' using 2:6 with linespoints title '$N dies'"
    done
    gnuplot <<EOF
set terminal png size 1000,800
set output '$PNG'
set multiplot layout 2,1 title "SIMULATED pipeline ($(sed -n 's/^name *//p' "$PROFILE")), $TOKENS tokens a stream"
set logscale x 2
set xlabel 'concurrent streams'
set ylabel 'aggregate decode tokens/s'
set key left top
plot $plots
set ylabel 'least busy stage, % of wall time'
set yrange [0:105]
plot $plots2
unset multiplot
EOF
    echo "bench-pipeline-sim: plot: $PNG"
else
    echo "bench-pipeline-sim: no gnuplot (deploy/install-deps.sh installs gnuplot-nox): no plot"
fi
