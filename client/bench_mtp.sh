#!/bin/sh
# make bench-mtp — what speculative decoding with the MTP head buys, at
# forced acceptance rates: random weights accept almost no draft, so each
# request's drafts come from the bench oracle (its own plain run, recorded
# first: each draft right with probability alpha, else a token that cannot
# match), while the last stage still runs its MTP head for every draft
# (the cost is real, only the choice is forced). A generated model with
# the head (qwen35-mkmodel --mtp: BENCH_PRESET=mini, the make bench model
# with its head, or 35b-a3b).
#
# For 1 stage (every layer) and 2 stages (half the layers each), 1, 4 and
# 16 streams of BENCH_TOKENS (32) tokens each: aggregate decode tokens/s
# without drafts, then with at most k = 1, 2, 3 drafts per step at alpha
# 0, 0.5, 0.8, 1, each as a speed-up over the plain run measured just
# before it (the same pipeline, the same prompts); the ids of every run
# are checked equal to the plain run's. Targets (issue #29): alpha 0.8,
# k 2: >= 1.6x at 1 stream on 1 stage, >= 1.3x at 16 streams on 2 stages,
# >= 1.0x everywhere.
#
# Env: BIN, QWEN35_GOLDEN, BENCH_PRESET (mini, 35b-a3b), BENCH_MODEL,
# BENCH_TOKENS (32), BENCH_STREAMS ("1 4 16"), BENCH_ALPHAS ("0 0.5 0.8 1"),
# BENCH_DRAFTS ("1 2 3"), BENCH_STAGES ("1 2"), BENCH_THREADS (1 per stage),
# BENCH_ADAPT (0; 1: the adaptive draft length), BENCH_REPS (1: pairs of a
# plain and a speculative run per row, their medians reported).
set -eu
P35_ME=bench-mtp
. "$(dirname "$0")/pipeline.sh"

GOLDEN=${QWEN35_GOLDEN:-../shared/golden}
PRESET=${BENCH_PRESET:-mini}
if [ -n "${BENCH_MODEL:-}" ]; then
    MODEL=$BENCH_MODEL
else
    rc=0
    MODEL=$(sh "$(dirname "$0")/../tools/bench_preset.sh" "$PRESET-mtp" "$BIN" "$GOLDEN") || rc=$?
    [ "$rc" -eq 3 ] && exit 0
    [ "$rc" -eq 0 ] || p35_die "no model for BENCH_PRESET=$PRESET"
fi
TOKENS=${BENCH_TOKENS:-32}
REPS=${BENCH_REPS:-1}
# BENCH_ADAPT=1: the coordinator's adaptive draft length (k is then the most
# a step may verify); default: every step verifies k drafts (the mechanics)
ADAPT=--no-draft-adapt
[ "${BENCH_ADAPT:-0}" = 1 ] && ADAPT=
THREADS=${BENCH_THREADS:-1}
N_LAYER=$("$BIN/qwen35-info" "$MODEL" | sed -n 's/^ *layers *\([0-9]*\) main.*/\1/p')
[ -n "$N_LAYER" ] || p35_die "qwen35-info $MODEL: no layer count"
"$BIN/qwen35-info" "$MODEL" | grep -qi 'mtp.*[1-9]' || p35_die "$MODEL has no MTP head (qwen35-mkmodel --mtp)"
echo "bench-mtp: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench-mtp: $MODEL: $N_LAYER layers + the MTP head; $TOKENS tokens a stream, $THREADS thread(s) a stage"

p35_init
# rate FILES...: aggregate decode tokens/s over --json streams (tokens after
# each stream's first / (the last token's time - the first first token's))
rate() {
    awk -F'"t":' '
        /"event":"piece"/ {
            t = $2 + 0
            s = $0; sub(/.*"ids":\[/, "", s); sub(/\].*/, "", s)
            n = s == "" ? 0 : split(s, parts, ",")
            if (!(FILENAME in first)) { first[FILENAME] = t; n--; if (t0 == 0 || t < t0) t0 = t }
            cnt += n
            if (t > t1) t1 = t
        }
        END { if (t1 > t0) printf "%.2f", cnt / (t1 - t0); else print "0" }' "$@"
}
ids_of() { grep -o '"ids":\[[0-9,]*\]' "$1" | sed 's/"ids":\[//;s/\]//' | tr ',' ' ' | tr -s ' ' '\n' | grep .; }

# streams S LABEL [client flags]: S streams at once, each its own prompt;
# the aggregate rate in $RATE; stream i's output in $P35_RUN/LABEL.i
streams() {
    _s=$1 _l=$2
    shift 2
    _pids=""
    for i in $(seq 1 "$_s"); do
        _o=""
        [ -f "$P35_RUN/oracle.$i" ] && [ "$_l" != plain ] && _o="--draft-oracle $P35_RUN/oracle.$i"
        # shellcheck disable=SC2086
        p35_bg_client "$P35_RUN/$_l.$i" --prompt-ids "$P35_RUN/p$i.ids" -n "$TOKENS" --ignore-eos --json \
            --temp 1 --seed "$i" --timeout 900000 $_o "$@"
        _pids="$_pids $P35_LAST"
    done
    for p in $_pids; do wait "$p" || p35_die "$_l: a stream failed: $(cat "$P35_RUN/$_l".*.err)"; done
    _files=""
    for i in $(seq 1 "$_s"); do _files="$_files $P35_RUN/$_l.$i"; done
    # shellcheck disable=SC2086
    RATE=$(rate $_files)
}

for i in $(seq 1 16); do
    awk -v s="$i" 'BEGIN { srand(s); for (k = 0; k < 12; k++) printf "%d ", 100 + int(rand() * 5000); print "" }' \
        >"$P35_RUN/p$i.ids"
done
mid=$((N_LAYER / 2))
echo "bench-mtp: stages streams alpha k: tokens/s (plain tokens/s) speed-up, drafts accepted"
for n in ${BENCH_STAGES:-1 2}; do
    if [ "$n" = 1 ]; then
        p35_stage all "$MODEL" "0:$N_LAYER" --threads "$THREADS" --max-seqs 16 --max-ctx 512 --mtp
        p35_coord "$MODEL" all -- --max-seqs 16 --max-ctx 512 --draft 4 --bench-draft-oracle $ADAPT
    else
        p35_stage s0 "$MODEL" "0:$mid" --threads "$THREADS" --max-seqs 16 --max-ctx 512
        p35_stage s1 "$MODEL" "$mid:$N_LAYER" --threads "$THREADS" --max-seqs 16 --max-ctx 512 --mtp
        p35_coord "$MODEL" s0 s1 -- --max-seqs 16 --max-ctx 512 --draft 4 --bench-draft-oracle $ADAPT
    fi
    p35_wait_ready 900
    for s in ${BENCH_STREAMS:-1 4 16}; do
        rm -f "$P35_RUN"/oracle.*
        streams "$s" plain --no-draft
        for i in $(seq 1 "$s"); do ids_of "$P35_RUN/plain.$i" >"$P35_RUN/oracle.$i"; done
        for a in ${BENCH_ALPHAS:-0 0.5 0.8 1}; do
            for k in ${BENCH_DRAFTS:-1 2 3}; do
                # BENCH_REPS pairs: the plain rate just before each, on the
                # same pipeline (the machine's load drifts); the medians
                : >"$P35_RUN/pairs"
                ta=0 td=0
                for rep in $(seq 1 "$REPS"); do
                    streams "$s" plain --no-draft
                    base=$RATE
                    # only this run's files: a wider run before left more spec.* behind
                    rm -f "$P35_RUN"/spec.*
                    streams "$s" spec --draft "$k" --draft-alpha "$a"
                    set -- $(cat "$P35_RUN"/spec.* | grep '"event":"final"' |
                             awk '{ d = $0; sub(/.*"drafted":/, "", d); a = $0; sub(/.*"accepted":/, "", a)
                                    ta += a + 0; td += d + 0 } END { printf "%d %d", ta, td }')
                    ta=$((ta + $1)) td=$((td + $2))
                    for i in $(seq 1 "$s"); do
                        ids_of "$P35_RUN/spec.$i" | cmp -s - "$P35_RUN/oracle.$i" ||
                            p35_die "$n stage(s), $s streams, alpha $a, k $k: stream $i's tokens differ from the plain run's"
                    done
                    echo "$RATE $base" >>"$P35_RUN/pairs"
                done
                set -- $(awk '{ r[NR] = $1; b[NR] = $2; q[NR] = $2 > 0 ? $1 / $2 : 0; all = all sprintf(" %.2f", q[NR]) }
                              function med(v, n,   i, j, x) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
                                                              return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
                              END { printf "%.2f %.2f %.2f%s", med(r, NR), med(b, NR), med(q, NR), all }' "$P35_RUN/pairs")
                RATE=$1 base=$2 sp=$3
                shift 3
                reps=""
                [ "$REPS" -gt 1 ] && reps=" (median of $REPS pairs:$(printf ' %sx' "$@"))"
                echo "bench-mtp: $n $s $a $k: $RATE ($base) ${sp}x, $ta/$td$reps"
                echo "RESULT mtp $n $s $a $k $RATE $base $sp"
            done
        done
    done
    p35_stop
    p35_clear_logs
done
