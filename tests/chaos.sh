#!/bin/bash
# Chaos: 16 concurrent streaming clients (greedy and seeded, prompts of 5
# to 256 tokens) on the tiny golden model through 3 stages and a spare of
# the middle one, plus 2 SSE streams through qwen35-http, while a bounded
# schedule SIGKILLs, SIGSTOP/SIGCONTs and SIGTERMs random stages (the
# spare too), and a few times the coordinator, qwen35-http or a client,
# and restarts them. Every request's tokens are compared with its
# undisturbed run.
#
#   bash tests/chaos.sh [SECONDS [FAULTS]]     (make chaos: 240 s, 40 faults)
#
# Prints the faults injected, then per fault kind (the requests running
# while a fault of that kind hit; "none": no fault) the requests completed
# identical, changed, lost (the stream ended with neither its end nor an
# error), ended with an error, and the longest pause a client saw between
# two events; then the totals. A request whose own client (or qwen35-http)
# was killed is counted as killed, not lost. Exits 1 unless every other
# request completed identical. bash for $EPOCHREALTIME and $RANDOM.
set -u
. "$(dirname "$0")/lib.sh"
DUR=${1:-240}
NF=${2:-40}
NC=16
RANDOM=${CHAOS_SEED:-12345}
setup
T=$P35_RUN/t
ids64 "$T.p64"
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

LAYERS=(0:3 3:6 6:8 3:6)   # 3: the spare of stage 1
NAMES=(s0 s1 s2 sp1)
stage() { p35_stage "${NAMES[$1]}" "$M" "${LAYERS[$1]}" --threads 1 --max-seqs 16 --max-ctx 1024; }
coord() {
    p35_coord "$M" s0 s1 s2 -- --spare "ipc://$P35_RUN/sp1.sock ${LAYERS[3]}" --max-seqs 16 \
        --max-ctx 1024 --max-queue 64 --step-timeout-ms "$(p35_scale 3000)" --replay-wait-ms 60000
}
http() {
    : >"$P35_RUN/http.log"
    "$BIN/qwen35-http" --listen 127.0.0.1:0 --coordinator "$P35_EP" --max-connections 64 \
        >>"$P35_RUN/http.log" 2>&1 &
    P35_PID_http=$!
    case " $P35_NAMES " in *" http "*) ;; *) P35_NAMES="$P35_NAMES http" ;; esac
    wait_for "$P35_RUN/http.log" "serving http://127.0.0.1:" 30 || fail "qwen35-http did not come up"
    # renamed into place: a client starting now reads the old port or the
    # new one, never an empty file (an empty port: curl fails, 0 lines, lost)
    sed -n 's|.*serving http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$P35_RUN/http.log" | head -n 1 >"$T.port.new"
    mv "$T.port.new" "$T.port"
}
for k in 0 1 2 3; do stage $k; done
coord
p35_wait_ready 60
http

ids_of() { grep -o '"ids":\[[-0-9,]*\]' "$1" | sed 's/.*\[//;s/\]//' | tr ',' '\n' | grep . | tr '\n' ' '; }
sse_ids() { grep -o '"token_ids":\[[-0-9,]*\]' "$1" | sed 's/.*\[//;s/\]//' | tr ',' '\n' | grep . | tr '\n' ' '; }
NH=2   # SSE streams through qwen35-http: clients NC+1 .. NC+NH
body() {   # body I: client I's request as an OpenAI completion (prompt ids, return_token_ids)
    local i=$1 len=${LENS[$(( ($1 - 1) % 16 ))]} n=$(( 24 + 8 * ($1 % 6) ))
    local ids samp
    ids=$(tr '\n' ',' <"$T.p$len" | sed 's/,$//')
    if [ $((i % 2)) -eq 1 ]; then samp='"temperature":0'
    else samp="\"temperature\":0.8,\"top_k\":40,\"seed\":$i"; fi
    printf '{"prompt":[%s],"max_tokens":%d,"ignore_eos":true,%s,"stream":true,"return_token_ids":true}' \
        "$ids" "$n" "$samp"
}
sse() {   # sse I OUT: client I's SSE stream through qwen35-http
    curl -sN --max-time "$(p35_scale 120)" "http://127.0.0.1:$(cat "$T.port")/v1/completions" \
        -H 'Content-Type: application/json' --data-binary "$(body "$1")" >"$2" 2>/dev/null
}
for i in $(seq $((NC + 1)) $((NC + NH))); do
    sse $i "$T.ref$i"
    grep -q '^data: \[DONE\]' "$T.ref$i" && ! grep -q '"error"' "$T.ref$i" ||
        fail "reference SSE run $i failed: $(tail -c 300 "$T.ref$i")"
    sse_ids "$T.ref$i" >"$T.refids$i"
done

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
    grep -q '"event":"final"' "$T.ref$i" || fail "reference run $i failed: $(tail -n 1 "$T.ref$i")"
    ids_of "$T.ref$i" >"$T.refids$i"
done
echo "chaos: $NC + $NH (SSE) references, $NF faults over $DUR s"
echo 0 >"$T.httpgen"

END=$(( $(date +%s) + DUR ))
# client I: its request again and again until the end; one result line
# per request: "ok|changed|dup|lost|error|killed PAUSE START END [why]"
# (START, END: microseconds). The client's pid is in $T.cpid$i (a fault
# may SIGKILL it: then $T.killed$i.PID exists).
verdict() {   # verdict OUT GOT WANT ENDED ERRORED: the result word
    if [ "$5" = 1 ]; then echo error
    elif [ "$4" != 1 ]; then echo lost
    elif [ "$2" = "$3" ]; then echo ok
    elif [ "$(echo "$2" | wc -w)" -gt "$(echo "$3" | wc -w)" ]; then echo dup
    else echo changed; fi
}
client_loop() {
    local i=$1 k=0 out prev now gap maxgap t0 got want v ended errored gen
    while [ "$(date +%s)" -lt $END ]; do
        k=$((k + 1))
        out=$T.run$i.$k
        prev=$EPOCHREALTIME maxgap=0 t0=${EPOCHREALTIME/./}
        gen=$(cat "$T.httpgen")
        if [ "$i" -le $NC ]; then
            # shellcheck disable=SC2046
            sh -c 'echo $$ >"$0"; exec "$@"' "$T.cpid$i" "$BIN/qwen35-client" --endpoint "$P35_EP" \
                $(args $i) --json --timeout 60000 2>"$out.err"
        else
            sh -c 'echo $$ >"$0"; exec "$@"' "$T.cpid$i" curl -sN --max-time "$(p35_scale 120)" \
                "http://127.0.0.1:$(cat "$T.port")/v1/completions" -H 'Content-Type: application/json' \
                --data-binary "$(body $i)" 2>"$out.err"
        fi | while IFS= read -r line; do
            now=$EPOCHREALTIME
            printf '%s\n' "$line"
            gap=$(( (${now/./} - ${prev/./}) / 1000 ))
            [ $gap -gt $maxgap ] && maxgap=$gap && echo $maxgap >"$out.gap"
            prev=$now
        done >"$out"
        want=$(cat "$T.refids$i")
        gap=$(cat "$out.gap" 2>/dev/null || echo 0)
        if [ "$i" -le $NC ]; then
            got=$(ids_of "$out")
            ended=0; grep -q '"event":"final"' "$out" && ended=1
            errored=0; grep -q '"event":"error"' "$out" && errored=1
            why="$(grep -o '"message":"[^"]*"' "$out" | head -n 1 | cut -c1-200)$(tail -n 1 "$out.err")"
        else
            got=$(sse_ids "$out")
            ended=0; grep -q '^data: \[DONE\]' "$out" && ended=1
            errored=0; grep -q '"error"' "$out" && errored=1
            why=$(grep -o '"message":"[^"]*"' "$out" | head -n 1 | cut -c1-200)
        fi
        v=$(verdict "$out" "$got" "$want" $ended $errored)
        if [ "$v" != ok ] && { [ -e "$T.killed$i.$(cat "$T.cpid$i")" ] ||
                               { [ "$i" -gt $NC ] && { [ "$(cat "$T.httpgen")" != "$gen" ] ||
                                                       [ $((gen % 2)) -eq 1 ]; }; }; }; then
            v=killed
        fi
        case $v in
        ok|killed) echo "$v $gap $t0 ${EPOCHREALTIME/./}" ;;
        error|lost) echo "$v $gap $t0 ${EPOCHREALTIME/./} client $i ($([ "$i" -le $NC ] && echo qwen35-client || echo SSE)), $(wc -l <"$out") lines: $why" ;;
        *) echo "$v $gap $t0 ${EPOCHREALTIME/./} got [$got] want [$want]" ;;
        esac
    done >"$T.res$i"
}
loops=""
for i in $(seq 1 $((NC + NH))); do
    client_loop $i &
    loops="$loops $!"
done
fault() { echo "$1 ${EPOCHREALTIME/./}" >>"$T.faults"; }   # fault KIND: when it hit

nk=0 ns=0 nt=0 nco=0 nsp=0 nh=0 ncl=0
# fault f at START + f * DUR / (NF + 1), whatever the ones before took
START=${EPOCHREALTIME/./}
for f in $(seq 1 $NF); do
    at=$(( START + f * DUR * 1000000 / (NF + 1) ))
    left=$(( at - ${EPOCHREALTIME/./} ))
    [ $left -gt 0 ] && sleep "$(awk -v us=$left 'BEGIN { printf "%.3f", us / 1e6 }')"
    [ "$(date +%s)" -lt $((END - 2)) ] || break
    k=$((RANDOM % 3)) r=$((RANDOM % 13))
    case $r in
    0)  nco=$((nco + 1)); fault "coordinator SIGKILL"; p35_kill coord KILL; sleep 1; coord ;;
    1|2|3) nk=$((nk + 1)); fault "stage SIGKILL"; p35_kill s$k KILL; sleep "0.$((RANDOM % 9 + 1))"; stage $k ;;
    4)  nsp=$((nsp + 1)); fault "spare SIGKILL"; p35_kill sp1 KILL; sleep "0.$((RANDOM % 9 + 1))"; stage 3 ;;
    5|6|7) ns=$((ns + 1)); fault "stage SIGSTOP"; kill -STOP "$(eval echo \$P35_PID_s$k)"; sleep $((2 + RANDOM % 3))
           kill -CONT "$(eval echo \$P35_PID_s$k)" ;;
    8|9) nt=$((nt + 1)); fault "stage SIGTERM"; p35_kill s$k TERM; stage $k ;;
    10) nh=$((nh + 1)); fault "qwen35-http SIGKILL"; echo $(( $(cat "$T.httpgen") + 1 )) >"$T.httpgen"
        # the generation changes before the kill and again once the new one
        # listens (odd while it restarts): a stream that began in between
        # (refused, or on the old port) counts as killed with it, even one
        # refused at once, before the second change
        p35_kill http KILL; http; echo $(( $(cat "$T.httpgen") + 1 )) >"$T.httpgen" ;;
    *)  ncl=$((ncl + 1)); fault "client SIGKILL"; c=$((RANDOM % (NC + NH) + 1))
        pid=$(cat "$T.cpid$c" 2>/dev/null) && touch "$T.killed$c.$pid" && kill -KILL "$pid" 2>/dev/null ;;
    esac
done
for p in $loops; do wait "$p"; done   # the clients finish their last requests
cat "$T".res* >"$T.all"
total=$(wc -l <"$T.all")
ok=$(grep -c '^ok' "$T.all")
ch=$(grep -c '^changed' "$T.all")
dup=$(grep -c '^dup' "$T.all")
lost=$(grep -c '^lost' "$T.all")
er=$(grep -c '^error' "$T.all")
kl=$(grep -c '^killed' "$T.all")
pause=$(awk '$1 != "killed" { if ($2 > m) m = $2 } END { printf "%.2f", m / 1000 }' "$T.all")
echo "faults injected: $((nk + ns + nt + nco + nsp + nh + ncl)) (stage SIGKILL $nk, SIGSTOP $ns, SIGTERM $nt, spare SIGKILL $nsp, coordinator SIGKILL $nco, qwen35-http SIGKILL $nh, client SIGKILL $ncl)"
# per fault kind: the requests that ran while one of that kind hit
touch "$T.faults"
printf "  %-20s %9s %7s %4s %6s %6s %9s\n" "fault kind" identical changed lost errored killed "pause s"
awk 'FNR == NR { n = split($0, w, " "); t = w[n]; k = $0; sub(/ [0-9]+$/, "", k); ft[++nf] = t; fk[nf] = k; kinds[k] = 1; next }
     { hit = 0
       for (j = 1; j <= nf; j++) if (ft[j] >= $3 && ft[j] <= $4) { seen[fk[j]] = 1; hit = 1 }
       if (!hit) seen["none"] = 1
       for (k in seen) { c[k, $1]++; if ($1 != "killed" && $2 > p[k]) p[k] = $2; kinds[k] = 1 }
       delete seen }
     END { for (k in kinds) printf "  %-20s %9d %7d %4d %6d %6d %9.2f\n", k, c[k, "ok"], c[k, "changed"] + c[k, "dup"], c[k, "lost"], c[k, "error"], c[k, "killed"], p[k] / 1000 }' \
    "$T.faults" "$T.all" | sort
echo "requests: $total ($((NH)) SSE streams through qwen35-http among the clients), completed identical: $ok, changed: $ch, duplicates: $dup, lost: $lost, ended with an error: $er, killed with their client: $kl"
grep '^error\|^lost' "$T.all" | cut -d' ' -f1,5- | sort | uniq -c | head -n 5 | sed 's/^/  /'
grep '^changed\|^dup' "$T.all" | head -n 3 | sed 's/^/  /'
echo "longest pause a client saw: $pause s"
st=$(p35_client --status --json --timeout 10000 2>/dev/null) || st=""
[ "$(p35_field "$st" active)" = 0 ] && [ "$(p35_field "$st" queued)" = 0 ] ||
    fail "requests still held after every client ended: $(printf '%s' "$st" | grep -o '"active":[0-9]*,"queued":[0-9]*')"
[ "$total" -gt 0 ] && [ "$((ok + kl))" -eq "$total" ] || fail "$((total - ok - kl)) of $total requests not identical"
ok "every request not hit by its own kill completed identical"
