#!/bin/sh
# Stage faults cost a pause, never a request (2 stages, tiny Q8_0).
# Four streams (greedy and seeded, prompts of 64, 20, 128 and 5 tokens)
# run undisturbed once for reference; then, for each fault, the same four
# run again while the fault hits and the stage comes back (as systemd's
# Restart= would bring it). Every stream must complete with exactly the
# tokens of its undisturbed run: the coordinator rebuilds the sequences on
# every stage from its token record.
# - SIGKILL of the last and of the first stage mid-decode
# - SIGKILL of a stage mid-prefill (128- and 64-token prompts just sent)
# - SIGSTOP of a stage for 10 s (the step deadline declares it lost)
# - SIGTERM of a stage with 4 requests in flight (drain, restart)
# - a rolling restart of both stages under load
# - a stage that does not come back within replay-wait: errors naming the
#   last token delivered, within the bound
# - SIGKILL of the coordinator mid-stream, restarted: the clients resume
#   their streams there, identical; not restarted: an error within the
#   client's timeout
set -eu
P35_ME=it_pipeline_faults
. "$(dirname "$0")/../client/pipeline.sh"
G=${QWEN35_GOLDEN:?}
M=$G/models/tiny-Q8_0.gguf
p35_init
T=$P35_RUN/t
N=160
tr -s ' \n' '\n' <"$G/tokens64.txt" | grep . >"$T.p64"
head -n 20 "$T.p64" >"$T.p20"
cat "$T.p64" "$T.p64" >"$T.p128"
head -n 5 "$T.p64" >"$T.p5"
# client i: prompt and sampling
args() {
    case $1 in
    1) echo "--prompt-ids $T.p64 --temp 0" ;;
    2) echo "--prompt-ids $T.p20 --temp 0.8 --seed 7" ;;
    3) echo "--prompt-ids $T.p128 --temp 0.7 --top-k 20 --seed 3" ;;
    4) echo "--prompt-ids $T.p5 --temp 1.0 --seed 11 --repeat-penalty 1.1" ;;
    esac
}

stage() { p35_stage "$1" "$M" "$2" --threads 1 --max-seqs 8 --max-ctx 1024; }
stage s0 0:4
stage s1 4:8
p35_coord "$M" s0 s1 -- --max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms 20000
p35_wait_ready 30

now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{ printf "%.1f", $1 - $2 }'; }
nids() { wc -w <"$1" 2>/dev/null || echo 0; }
wait_ids() {   # wait_ids FILE N SECONDS: until FILE holds N ids
    _end=$(( $(date +%s) + $3 ))
    while [ "$(nids "$1")" -lt "$2" ]; do
        [ "$(date +%s)" -ge "$_end" ] && return 1
        sleep 0.05
    done
}

for i in 1 2 3 4; do
    # shellcheck disable=SC2046
    p35_client $(args $i) -n $N --ignore-eos --ids --timeout 30000 >"$T.ref$i" ||
        p35_die "reference run $i failed"
    [ "$(nids "$T.ref$i")" -eq $N ] || p35_die "reference run $i: $(nids "$T.ref$i") tokens, expected $N"
done
echo "references: 4 undisturbed runs of $N tokens"

# start4 NAME: the four streams in the background (pids in $pids)
start4() {
    pids=""
    for i in 1 2 3 4; do
        # shellcheck disable=SC2046
        p35_bg_client "$T.$1$i" $(args $i) -n $N --ignore-eos --ids --timeout 30000
        pids="$pids $P35_LAST"
    done
}
# check4 NAME T0: each stream ends within 90 s, exit 0, equal to its reference
check4() {
    i=1
    for p in $pids; do
        _end=$(( $(date +%s) + 90 ))
        while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$_end" ]; do sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            p35_fail "$1: client $i still running 90 s after the fault"
            kill -KILL "$p" 2>/dev/null || true
        fi
        rc=0
        wait "$p" || rc=$?
        if [ $rc -ne 0 ]; then
            p35_fail "$1: client $i exited $rc: $(tail -n 2 "$T.$1$i.err" | tr '\n' ' ')"
        elif ! cmp -s "$T.$1$i" "$T.ref$i"; then
            p35_fail "$1: client $i: [$(cat "$T.$1$i")] != undisturbed [$(cat "$T.ref$i")]"
        fi
        i=$((i + 1))
    done
    _r=$(rebuilds)
    [ "$_r" -ge $((R0 + ${3:-1})) ] ||
        p35_fail "$1: the fault rebuilt nothing ($_r rebuilds, $R0 before): it hit no stream"
    R0=$_r
    echo "$1: 4 streams identical to their undisturbed runs, $(since "$2") s after the fault"
}
# rebuilds: times the coordinator rebuilt sequences after a loss
rebuilds() { grep -c 'rebuilding [1-9]' "$P35_RUN/coord.log" || true; }
R0=0
mid_decode() {   # waits until every stream has delivered 8 tokens
    for i in 1 2 3 4; do
        wait_ids "$T.$1$i" 8 30 || p35_fail "$1: stream $i never started"
    done
}

start4 kill-last
mid_decode kill-last
t0=$(now)
p35_kill s1 KILL
sleep 1
stage s1 4:8
check4 kill-last "$t0"

start4 kill-first
mid_decode kill-first
t0=$(now)
p35_kill s0 KILL
sleep 1
stage s0 0:4
check4 kill-first "$t0"

# prefill: the last stage held (SIGSTOP) while the prompts go in, then
# killed: nothing had streamed, every request was in prefill
p35_kill s1 STOP
start4 kill-prefill
sleep 0.5
for i in 1 2 3 4; do
    [ "$(nids "$T.kill-prefill$i")" -eq 0 ] || p35_fail "kill-prefill: stream $i had started"
done
t0=$(now)
p35_kill s1 KILL
stage s1 4:8
check4 kill-prefill "$t0"

start4 stop
mid_decode stop
t0=$(now)
lost0=$(grep -c 'lost: no reply to a' "$P35_RUN/coord.log" || true)
p35_kill s1 STOP
sleep 10
# held 10 s, and on until the coordinator has declared it lost (its
# deadline adapts to measured step times, long on a loaded machine)
_end=$(( $(date +%s) + 30 ))
while [ "$(grep -c 'lost: no reply to a' "$P35_RUN/coord.log" || true)" -le "$lost0" ] &&
      [ "$(date +%s)" -lt "$_end" ]; do sleep 0.2; done
kill -CONT "$P35_PID_s1"
check4 stop "$t0"
grep -q "lost: no reply to a" "$P35_RUN/coord.log" ||
    p35_fail "stop: the coordinator never declared the stopped stage lost by its deadlines"

start4 term
mid_decode term
t0=$(now)
p35_kill s0 TERM
stage s0 0:4
check4 term "$t0"

start4 rolling
mid_decode rolling
t0=$(now)
p35_kill s0 TERM
stage s0 0:4
p35_wait_ready 30
for i in 1 2 3 4; do wait_ids "$T.rolling$i" 16 30 || true; done
p35_kill s1 TERM
stage s1 4:8
check4 rolling "$t0" 2

# not back in time: the requests end with an error naming the last token
p35_kill coord TERM
p35_coord "$M" s0 s1 -- --max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms 2000
p35_wait_ready 30
p35_bg_client "$T.gone" --prompt-ids "$T.p64" -n 0 --ignore-eos --json --timeout 30000
pid=$P35_LAST
p35_wait_file "$T.gone" '"event":"piece"' 20 || p35_fail "gone: stream never started"
t0=$(now)
p35_kill s1 KILL
rc=0
wait "$pid" || rc=$?
dt=$(since "$t0")
[ $rc -ne 0 ] || p35_fail "gone: client exit 0 without its stage"
grep -q '"code":"UNAVAILABLE".*tokens were delivered (the last at index' "$T.gone" ||
    p35_fail "gone: no UNAVAILABLE error naming the last token ($(tail -n 1 "$T.gone"))"
awk -v d="$dt" 'BEGIN { exit !(d < 10) }' || p35_fail "gone: the error took $dt s (replay wait 2 s)"
echo "gone: ended after $dt s: $(grep -o '"message":"[^"]*"' "$T.gone" | tail -n 1 | cut -c1-160)"
stage s1 4:8
p35_wait_ready 30

# the coordinator killed mid-stream and restarted: each client resumes
# its stream there (the tokens it has as a resume prefix)
coord_opts="--max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000"
start4 coord-kill
mid_decode coord-kill
t0=$(now)
p35_kill coord KILL
cut=0
for i in 1 2 3 4; do [ "$(nids "$T.coord-kill$i")" -lt $N ] && cut=$((cut + 1)); done
[ $cut -gt 0 ] || p35_fail "coord-kill: every stream had ended before the kill"
sleep 1
# shellcheck disable=SC2086
p35_coord "$M" s0 s1 -- $coord_opts
R0=$(rebuilds)   # a new log: resumes are not rebuilds
check4 coord-kill "$t0" 0

# killed and not back: the client ends with UNAVAILABLE after its timeout
p35_bg_client "$T.coord" --prompt-ids "$T.p64" -n 0 --ignore-eos --json --timeout 3000
pid=$P35_LAST
p35_wait_file "$T.coord" '"event":"piece"' 20 || p35_fail "coordinator kill: stream never started"
t0=$(now)
p35_kill coord KILL
rc=0
wait "$pid" || rc=$?
dt=$(since "$t0")
grep -q '"code":"UNAVAILABLE".*not resumed within 3000 ms' "$T.coord" ||
    p35_fail "coordinator gone: no UNAVAILABLE error event ($(tail -n 1 "$T.coord"))"
[ $rc -ne 0 ] || p35_fail "coordinator gone: client exit 0"
awk -v d="$dt" 'BEGIN { exit !(d < 10) }' || p35_fail "coordinator gone: client took $dt s"
echo "coordinator gone: client ended with UNAVAILABLE after $dt s (--timeout 3000)"

p35_result "ok"
