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
# stage's busy share of wall time and the least of them, and "bound": the
# least busy share the split allows (the fastest stage's step over
# the slowest's, with the split balanced by time at B; stages may end at
# half-layers, after a layer's mixer), mean time to first
# token. Rate and busy shares are measured on the coordinator's --trace
# while every stream decodes. With 1 stream: the token interval against the
# sum of the stages' step times (the rest is the hops through the
# coordinator, per hop: median and mean over the tokens).
# Targets (N = 4, 8; S >= 2N): aggregate >= 85% of the ideal and every stage
# busy >= 85%; 1 stream: < 1 ms per hop.
# Prints a table; with gnuplot, draws build/bench-pipeline-sim.png
# (throughput vs ideal and the least busy stage's share, against streams).
#
# The simulated dies stand for dedicated hosts: where allowed (root), the
# stages and the coordinator run round-robin real-time ("chrt -r 10";
# BENCH_SIM_WRAP, empty: as they are), so other work on this machine does
# not delay their wake-ups (they sleep nearly all the time: a simulated
# step is a sleep).
#
# Env: BIN, BENCH_SIM_PROFILE, BENCH_SIM_DIES ("2 4 8"),
# BENCH_SIM_STREAMS ("1 2 4 8 16 32 64"), BENCH_TOKENS (32),
# BENCH_MICRO_BATCHES (the coordinator's default when unset),
# BENCH_COORD_OPTS (more coordinator options), BENCH_SIM_OUT (the PNG),
# BENCH_SIM_WRAP ("chrt -r 10" where chrt may), BENCH_SIM_WHOLE=1 (cut at whole
# layers only, as before half-layer ranges); P35_TCP_PORT=N: the
# stages on loopback TCP (tcp://127.0.0.1:N, N+1, ...) instead of ipc://.
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
if chrt -r 10 true 2>/dev/null; then P35_WRAP=${BENCH_SIM_WRAP-chrt -r 10}; else P35_WRAP=${BENCH_SIM_WRAP-}; fi
[ -f "$PROFILE" ] || p35_die "$PROFILE: no such profile (BENCH_SIM_PROFILE)"

if [ ! -f "$MODEL" ]; then
    # the layer kinds and sizes of the 35B-A3B's stack; the simulator reads no weights
    mkdir -p "$(dirname "$MODEL")"
    "$BIN/qwen35-mkmodel" --preset tiny --layers $N_LAYER --experts 4 -o "$MODEL" >/dev/null ||
        p35_die "qwen35-mkmodel failed"
fi

# cost FIRST LAST ROWS SEQS: microseconds the profile gives a step of
# layers [FIRST, LAST) (each a layer L or L.5: after layer L's mixer; a
# half-layer costs its block's share, the profile's "mixer" line; embd
# with layer 0, head with the last layer).
cost() {
    awk -v a="$1" -v b="$2" -v r="$3" -v s="$4" -v nl=$N_LAYER '
        /^[ \t]*#/ { next }
        $1 == "ssm" || $1 == "attn" { f[$1] = $2; w[$1] = $3; q[$1] = $4 }
        $1 == "embd" || $1 == "head" { f[$1] = $2; w[$1] = $3 }
        $1 == "mixer" { m["ssm"] = $2; m["attn"] = $3 }
        END { if (!("ssm" in m)) { m["ssm"] = 0.5; m["attn"] = 0.5 }
              t = 0
              for (u = 2 * a; u < 2 * b; u++) { i = int(u / 2); k = (i + 1) % 4 == 0 ? "attn" : "ssm"
                                                sh = u % 2 ? 1 - m[k] : m[k]
                                                t += sh * (f[k] + w[k] * r + q[k] * s) }
              if (a == 0) t += f["embd"] + w["embd"] * r
              if (b == nl) t += f["head"] + w["head"] * s
              printf "%.1f", t }' "$PROFILE"
}

# split N B: N layer ranges "A:B" (cut at layers or half-layers: L.5 is
# after layer L's mixer) whose decode steps of B sequences keep the
# slowest stage as fast as any split can (min-max over contiguous splits
# of the 2 x layers blocks, a DP like qwen35-info --plan's), and among
# those the fastest stage as slow as possible (the busiest the other
# stages can be): the plan by time, at the batch the coordinator will form.
# BENCH_SIM_WHOLE=1: whole layers only (the cuts before half-layer ranges).
split() {
    awk -v n="$1" -v r="$2" -v nl=$N_LAYER -v whole="${BENCH_SIM_WHOLE:-0}" '
        /^[ \t]*#/ { next }
        $1 == "ssm" || $1 == "attn" { c[$1] = $2 + ($3 + $4) * r }
        $1 == "embd" || $1 == "head" { c[$1] = $2 + $3 * r }
        $1 == "mixer" { m["ssm"] = $2; m["attn"] = $3 }
        END { if (!("ssm" in m)) { m["ssm"] = 0.5; m["attn"] = 0.5 }
              nu = 2 * nl; P[0] = 0
              # unit u: layer u / 2, its mixer (u even) or FFN (u odd)
              for (u = 0; u < nu; u++) { i = int(u / 2); k = (i + 1) % 4 == 0 ? "attn" : "ssm"
                                         sh = u % 2 ? 1 - m[k] : m[k]
                                         P[u + 1] = P[u] + sh * c[k] + (u == 0 ? c["embd"] : 0) + (u == nu - 1 ? c["head"] : 0) }
              step = whole ? 2 : 1
              # f[s, i]: the least max cost of units [0, i) over s stages
              for (i = step; i <= nu; i += step) f[1, i] = P[i]
              for (s = 2; s <= n; s++)
                  for (i = s * step; i <= nu; i += step) { f[s, i] = 1e30
                      for (j = (s - 1) * step; j < i; j += step) { v = f[s - 1, j] > P[i] - P[j] ? f[s - 1, j] : P[i] - P[j]
                                                                   if (v < f[s, i]) f[s, i] = v } }
              M = f[n, nu] + 1e-6
              # g[s, i]: the greatest min cost with every stage <= M
              for (i = step; i <= nu; i += step) g[1, i] = P[i] <= M ? P[i] : -1
              for (s = 2; s <= n; s++)
                  for (i = s * step; i <= nu; i += step) { g[s, i] = -1
                      for (j = (s - 1) * step; j < i; j += step) { if (g[s - 1, j] < 0 || P[i] - P[j] > M) continue
                                                                   v = g[s - 1, j] < P[i] - P[j] ? g[s - 1, j] : P[i] - P[j]
                                                                   if (v > g[s, i]) { g[s, i] = v; from[s, i] = j } } }
              cut[n] = nu
              for (s = n; s > 1; s--) cut[s - 1] = from[s, cut[s]]
              cut[0] = 0
              for (s = 0; s < n; s++) printf "%s:%s%s", txt(cut[s]), txt(cut[s + 1]), s < n - 1 ? " " : "\n" }
        function txt(u) { return u % 2 ? sprintf("%d.5", int(u / 2)) : sprintf("%d", u / 2) }' "$PROFILE"
}

# steady TRACE STAGES: the coordinator's --trace of one run, measured while
# every stream decodes (from the end of the last prefill step to the first
# step of a micro-batch with fewer sequences than before, less a tenth at
# each end): "RATE HOP_MEDIAN HOP_MEAN BUSY0 BUSY1 ..." — decode tokens/s
# (the last stage's sequences per step), and the stages' busy share of
# that window (%). HOP_*: per token of a micro-batch, (its interval on the
# last stage - the sum of its steps' times) / STAGES, in ms; meaningful
# with one micro-batch circulating (1 stream).
steady() {
    awk -v N="$2" '
        /"ph":"X"/ { t = $0; sub(/.*"tid":/, "", t); t = t + 0 - 1
                     ts = $0; sub(/.*"ts":/, "", ts); d = $0; sub(/.*"dur":/, "", d)
                     m = $0; sub(/.*"micro_batch":/, "", m); q = $0; sub(/.*"seqs":/, "", q)
                     p = $0; sub(/.*"prefill_rows":/, "", p)
                     n++; T[n] = t; B[n] = ts / 1000; E[n] = (ts + d) / 1000; MB[n] = m + 0; S[n] = q + 0
                     if (p + 0 > 0 && E[n] > t1) t1 = E[n]
                     if (E[n] > tend) tend = E[n] }
        END { t2 = tend
              for (i = 1; i <= n; i++) if (T[i] == N - 1 && B[i] > t1) {
                  if (MB[i] in last && S[i] < last[MB[i]] && B[i] < t2) t2 = B[i]
                  last[MB[i]] = S[i] }
              w = t2 - t1; a = t1 + w / 10; b = t2 - w / 10
              if (b <= a) { printf "0 0 0"; for (k = 0; k < N; k++) printf " n/a"; print ""; exit }
              tok = 0; nh = 0
              for (i = 1; i <= n; i++) {
                  lo = B[i] > a ? B[i] : a; hi = E[i] < b ? E[i] : b
                  if (hi > lo) busy[T[i]] += hi - lo
                  if (E[i] < a || E[i] > b) continue
                  sum[MB[i]] += E[i] - B[i]
                  if (T[i] != N - 1) continue
                  if (nl++) tok += S[i]; else e0 = E[i]   # tokens after the first step counted
                  e1 = E[i]
                  if (MB[i] in prev) { nh++; h[nh] = (E[i] - prev[MB[i]] - sum[MB[i]]) / N; hs += h[nh] }
                  prev[MB[i]] = E[i]; sum[MB[i]] = 0 }
              for (i = 1; i <= nh; i++) for (j = i + 1; j <= nh; j++) if (h[j] < h[i]) { x = h[i]; h[i] = h[j]; h[j] = x }
              printf "%.3f %.3f %.3f", (e1 > e0 ? 1000 * tok / (e1 - e0) : 0), nh ? h[int((nh + 1) / 2)] : 0, nh ? hs / nh : 0
              for (k = 0; k < N; k++) printf " %.1f", 100 * busy[k] / (b - a)
              print "" }' "$1"
}

p35_init
ROWS="$P35_RUN/rows"
: >"$ROWS"
for i in $(seq 1 $MAXS); do
    awk -v s="$i" 'BEGIN { srand(s); for (k = 0; k < 12; k++) printf "%d ", 1 + int(rand() * 400); print "" }' \
        >"$P35_RUN/p$i.ids"
done

echo "bench-pipeline-sim: SIMULATED dies ($(sed -n 's/^name *//p' "$PROFILE") from $PROFILE), $TOKENS tokens a stream${P35_WRAP:+, daemons under $P35_WRAP}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %-7s %-4s %-5s %9s %9s %7s %8s %8s %6s  %s\n' dies streams mb rows tok/s ideal "%ideal" ttft_ms min_busy bound "busy% per stage (split by time at that batch)"

for N in $DIES; do
    M=${MICRO:-$N}
    for S in $STREAMS_LIST; do
        B=$(( (S + M - 1) / M ))
        RANGES=$(split "$N" "$B")
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
        p35_coord "$MODEL" $names -- "$@" --trace "$P35_RUN/trace.json" ${BENCH_COORD_OPTS:-}
        p35_wait_ready 60
        outs=""
        pids=""
        for i in $(seq 1 "$S"); do
            p35_bg_client "$P35_RUN/o$i" --prompt-ids "$P35_RUN/p$i.ids" -n "$TOKENS" --ignore-eos \
                --json --seed "$i" --timeout 300000
            pids="$pids $P35_LAST"
            outs="$outs $P35_RUN/o$i"
        done
        for p in $pids; do wait "$p" || p35_die "$N dies, $S streams: a stream failed: $(cat "$P35_RUN"/o*.err)"; done
        p35_stop   # completes the trace
        # shellcheck disable=SC2086
        ttft=$(awk '/"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); tt += s + 0; nt++ }
                    END { printf "%.1f", (nt ? 1000 * tt / nt : 0) }' $outs)
        # rate and busy shares while every stream decodes, from the trace
        set -- $(steady "$P35_RUN/trace.json" "$N")
        rate=$1 hop_med=$2 hop_mean=$3
        shift 3
        busy="$*"
        minb=$(printf '%s\n' "$busy" | awk '{ m = 1e9; for (i = 1; i <= NF; i++) if ($i == "n/a") { print "n/a"; exit } else if ($i < m) m = $i; print m }')
        # the ideal: every stage busy all the time at B rows a step
        mbs=$M
        [ "$S" -lt "$mbs" ] && mbs=$S
        worst=0
        least=1e30
        sum1=0
        sumb=0
        for r in $RANGES; do
            c=$(cost "${r%:*}" "${r#*:}" "$B" "$B")
            worst=$(awk -v a="$worst" -v b="$c" 'BEGIN { print (b > a ? b : a) }')
            least=$(awk -v a="$least" -v b="$c" 'BEGIN { print (b < a ? b : a) }')
            sum1=$(awk -v a="$sum1" -v b="$(cost "${r%:*}" "${r#*:}" 1 1)" 'BEGIN { print a + b }')
            sumb=$(awk -v a="$sumb" -v b="$c" 'BEGIN { print a + b }')
        done
        # the least busy stage's share with the slowest busy all the time:
        # what the split (at half-layers) allows at best
        bound=$(awk -v a="$least" -v b="$worst" 'BEGIN { printf "%.1f", 100 * a / b }')
        # with fewer micro-batches than stages the chain cannot fill: each
        # micro-batch's tokens take the whole chain's time
        ideal=$(awk -v w="$worst" -v b="$B" -v sb="$sumb" -v n="$N" -v mbs="$mbs" \
            'BEGIN { r = mbs < n ? 1e6 * b * mbs / sb : 1e6 * b / w; printf "%.3f", r }')
        pct=$(awk -v a="$rate" -v b="$ideal" 'BEGIN { printf "%.1f", (b > 0 ? 100 * a / b : 0) }')
        printf '%-5s %-7s %-4s %-5s %9s %9s %7s %8s %8s %6s  %s\n' "$N" "$S" "$M" "$B" "$rate" "$ideal" "$pct" \
            "$ttft" "$minb" "$bound" "$busy"
        echo "$N $S $rate $ideal $pct $minb $ttft $bound" >>"$ROWS"
        if [ "$S" = 1 ]; then
            awk -v r="$rate" -v s="$sum1" -v n="$N" -v hm="$hop_med" -v ha="$hop_mean" 'BEGIN { if (r > 0) { iv = 1e6 / r
                printf "      1 stream: a token every %.2f ms; the profile'"'"'s steps sum to %.2f ms; per hop (%d hops, the measured steps taken off each token'"'"'s interval): median %.3f ms, mean %.3f ms (target < 1 ms)\n",
                    iv / 1000, s / 1000, n, hm, ha } }'
        fi
        p35_clear_logs
    done
done

echo "bench-pipeline-sim: targets (4 and 8 dies, streams >= 2 x dies): %ideal >= 85 and min_busy >= 85:"
awk '$1 >= 4 && $2 >= 2 * $1 { n++; ok = $5 >= 85 && $6 >= 85; good += ok
        printf "  %d dies, %2d streams: %.1f%% of ideal, least busy stage %.1f%% (the split allows %.1f%%): %s\n",
            $1, $2, $5, $6, $8, ok ? "holds" : "MISSED" }
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
