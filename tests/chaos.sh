#!/bin/bash
# Chaos: 16 concurrent streaming clients (greedy and seeded, prompts of 5
# to 256 tokens) on the tiny golden model through 3 stages, while a
# bounded schedule SIGKILLs, SIGSTOP/SIGCONTs and SIGTERMs random stages
# and, a few times, the coordinator, and restarts them. Every request's
# tokens are compared with its undisturbed run.
#
#   bash tests/chaos.sh [SECONDS [FAULTS]]     (make chaos: 240 s, 40 faults)
#
# Prints the faults injected, requests completed identical, changed (must
# be 0), duplicated tokens (must be 0), ended with an error (and why), and
# the longest pause a client saw between two events. Exits 1 unless every
# request completed identical. bash for $EPOCHREALTIME and $RANDOM.
set -u
P35_ME=chaos
. "$(dirname "$0")/../client/pipeline.sh"
G=${QWEN35_GOLDEN:?}
M=$G/models/tiny-Q8_0.gguf
DUR=${1:-240}
NF=${2:-40}
NC=16
RANDOM=${CHAOS_SEED:-12345}
p35_init
T=$P35_RUN/t
tr -s ' \n' '\n' <"$G/tokens64.txt" | grep . >"$T.p64"
for n in 5 20 40; do head -n $n "$T.p64" >"$T.p$n"; done
cat "$T.p64" "$T.p64" >"$T.p128"
cat "$T.p128" "$T.p128" >"$T.p256"
LENS=(5 20 40 64 128 256 5 20 40 64 128 20 5 64 40 256)
args() {   # args I: client i's request
    local i=$1 len=${LENS[$(( $1 - 1 ))]} n=$(( 24 + 8 * ($1 % 6) ))
    if [ $((i % 2)) -eq 1 ]; then
        echo "--prompt-ids $T.p$len -n $n --ignore-eos --temp 0"
    else
        echo "--prompt-ids $T.p$len -n $n --ignore-eos --temp 0.8 --top-k 40 --seed $i"
    fi
}

LAYERS=(0:3 3:6 6:8)
stage() { p35_stage "s$1" "$M" "${LAYERS[$1]}" --threads 1 --max-seqs 16 --max-ctx 1024; }
coord() {
    p35_coord "$M" s0 s1 s2 -- --max-seqs 16 --max-ctx 1024 --max-queue 64 \
        --step-timeout-ms 3000 --replay-wait-ms 60000
}
for k in 0 1 2; do stage $k; done
coord
p35_wait_ready 60

ids_of() { grep -o '"ids":\[[-0-9,]*\]' "$1" | sed 's/.*\[//;s/\]//' | tr ',' '\n' | grep . | tr '\n' ' '; }

# references, 4 at a time, undisturbed
refs=""
for i in $(seq 1 $NC); do
    # shellcheck disable=SC2046
    p35_client $(args $i) --json --timeout 60000 >"$T.ref$i" &
    refs="$refs $!"
    if [ $((i % 4)) -eq 0 ]; then
        for p in $refs; do wait "$p"; done
        refs=""
    fi
done
for i in $(seq 1 $NC); do
    grep -q '"event":"final"' "$T.ref$i" || p35_die "reference run $i failed: $(tail -n 1 "$T.ref$i")"
    ids_of "$T.ref$i" >"$T.refids$i"
done
echo "chaos: $NC references, $NF faults over $DUR s"

END=$(( $(date +%s) + DUR ))
# client I: its request again and again until the end; one result line
# per request: "ok|changed|dup|error PAUSE [why]"
client_loop() {
    local i=$1 k=0 out prev now gap maxgap
    while [ "$(date +%s)" -lt $END ]; do
        k=$((k + 1))
        out=$T.run$i.$k
        prev=$EPOCHREALTIME maxgap=0
        # shellcheck disable=SC2046
        "$BIN/qwen35-client" --endpoint "$P35_EP" $(args $i) --json --timeout 60000 2>"$out.err" |
        while IFS= read -r line; do
            now=$EPOCHREALTIME
            printf '%s\n' "$line"
            gap=$(( (${now/./} - ${prev/./}) / 1000 ))
            [ $gap -gt $maxgap ] && maxgap=$gap && echo $maxgap >"$out.gap"
            prev=$now
        done >"$out"
        got=$(ids_of "$out")
        want=$(cat "$T.refids$i")
        gap=$(cat "$out.gap" 2>/dev/null || echo 0)
        if ! grep -q '"event":"final"' "$out" || grep -q '"event":"error"' "$out"; then
            echo "error $gap $(grep -o '"message":"[^"]*"' "$out" | head -n 1 | cut -c1-200)$(tail -n 1 "$out.err")"
        elif [ "$got" = "$want" ]; then
            echo "ok $gap"
        elif [ ${#got} -gt ${#want} ] && [ "$(echo "$got" | wc -w)" -gt "$(echo "$want" | wc -w)" ]; then
            echo "dup $gap got [$got] want [$want]"
        else
            echo "changed $gap got [$got] want [$want]"
        fi
    done >"$T.res$i"
}
loops=""
for i in $(seq 1 $NC); do
    client_loop $i &
    loops="$loops $!"
done

nk=0 ns=0 nt=0 nco=0
# fault f at START + f * DUR / (NF + 1), whatever the ones before took
START=${EPOCHREALTIME/./}
for f in $(seq 1 $NF); do
    at=$(( START + f * DUR * 1000000 / (NF + 1) ))
    left=$(( at - ${EPOCHREALTIME/./} ))
    [ $left -gt 0 ] && sleep "$(awk -v us=$left 'BEGIN { printf "%.3f", us / 1e6 }')"
    [ "$(date +%s)" -lt $((END - 2)) ] || break
    k=$((RANDOM % 3)) r=$((RANDOM % 10))
    case $r in
    0)  nco=$((nco + 1)); p35_kill coord KILL; sleep 1; coord ;;
    1|2|3|4) nk=$((nk + 1)); p35_kill s$k KILL; sleep "0.$((RANDOM % 9 + 1))"; stage $k ;;
    5|6|7) ns=$((ns + 1)); kill -STOP "$(eval echo \$P35_PID_s$k)"; sleep $((2 + RANDOM % 3))
           kill -CONT "$(eval echo \$P35_PID_s$k)" ;;
    *)  nt=$((nt + 1)); p35_kill s$k TERM; stage $k ;;
    esac
done
for p in $loops; do wait "$p"; done   # the clients finish their last requests
cat "$T".res* >"$T.all"
total=$(wc -l <"$T.all")
ok=$(grep -c '^ok' "$T.all")
ch=$(grep -c '^changed' "$T.all")
dup=$(grep -c '^dup' "$T.all")
er=$(grep -c '^error' "$T.all")
pause=$(awk '{ if ($2 > m) m = $2 } END { printf "%.2f", m / 1000 }' "$T.all")
echo "faults injected: $((nk + ns + nt + nco)) (stage SIGKILL $nk, SIGSTOP $ns, SIGTERM $nt, coordinator SIGKILL $nco)"
echo "requests: $total, completed identical: $ok, changed: $ch, duplicates: $dup, ended with an error: $er"
grep '^error' "$T.all" | cut -d' ' -f3- | sort | uniq -c | head -n 5 | sed 's/^/  error: /'
grep '^changed\|^dup' "$T.all" | head -n 3 | sed 's/^/  /'
echo "longest pause a client saw: $pause s"
[ "$total" -gt 0 ] && [ "$ok" -eq "$total" ] || p35_fail "$((total - ok)) of $total requests not identical"
p35_result "ok"
