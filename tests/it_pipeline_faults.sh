#!/bin/sh
# Faults (2 stages, tiny Q8_0):
# - SIGKILL a stage mid-request: every affected client gets an error event
#   within 10 s; after the stage restarts, new requests succeed and equal
#   the golden continuation. Done for the last stage and the first.
# - SIGSTOP a stage (compute hung, its I/O thread alive): the step
#   deadline ends the clients' requests with an error within 10 s.
# - SIGKILL the coordinator: clients get an error at once, never hang.
set -eu
P35_ME=it_pipeline_faults
. "$(dirname "$0")/../client/pipeline.sh"
G=${QWEN35_GOLDEN:?}
M=$G/models/tiny-Q8_0.gguf
p35_init
T=$P35_RUN/t
GOLD=$(tr -s ' \n' ' ' <"$G/expect/tiny-Q8_0.greedy.txt" | sed 's/ $//;s/^ //')
STEP_OPT=""
"$BIN/qwen35-coordinator" --help 2>&1 | grep -q -- "--step-timeout-ms" && STEP_OPT="--step-timeout-ms 3000"

stage() { p35_stage "$1" "$M" "$2" --threads 1 --max-seqs 8 --max-ctx 4096; }
start() {
    stage s0 0:4
    stage s1 4:8
    # shellcheck disable=SC2086
    p35_coord "$M" s0 s1 -- --max-seqs 8 --max-ctx 4096 $STEP_OPT
    p35_wait_ready 30
}
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{ printf "%.2f", $1 - $2 }'; }

# fault NAME ACTION: 3 long streams; ACTION hits the pipeline once they
# all stream; each must end with an error event within 10 s.
fault() {
    name=$1 action=$2
    pids=""
    for i in 1 2 3; do
        p35_bg_client "$T.$name$i" --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json --seed $i --temp 0.7
        pids="$pids $P35_LAST"
    done
    for i in 1 2 3; do
        p35_wait_file "$T.$name$i" '"event":"piece"' 20 || p35_fail "$name: stream $i never started"
    done
    t0=$(now)
    eval "$action"
    i=1
    for p in $pids; do
        # 10 s for the error, checked by polling the output
        if ! p35_wait_file "$T.$name$i" '"event":"error"\|"finish":"error"' 10; then
            p35_fail "$name: client $i got no error event within 10 s after the fault ($(tail -n 1 "$T.$name$i"))"
            kill -KILL "$p" 2>/dev/null || true
        fi
        rc=0
        wait "$p" || rc=$?
        [ $rc -ne 0 ] || p35_fail "$name: client $i exited 0 after an error event"
        i=$((i + 1))
    done
    echo "$name: 3 clients got error events within $(since "$t0") s: $(grep -ho '"message":"[^"]*"' "$T.${name}1" | head -n 1)"
}

check_serving() {   # check_serving WHAT
    got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 20000) ||
        { p35_fail "$1: request failed after recovery"; return; }
    [ "$got" = "$GOLD" ] || p35_fail "$1: after recovery greedy [$got] != golden [$GOLD]"
    echo "$1: serving again, greedy continuation exact"
}

start
fault kill-last 'p35_kill s1 KILL'
stage s1 4:8
p35_wait_ready 30
check_serving kill-last

fault kill-first 'p35_kill s0 KILL'
stage s0 0:4
p35_wait_ready 30
check_serving kill-first

if [ -n "$STEP_OPT" ]; then
    fault stop-last 'p35_kill s1 STOP'
    kill -CONT "$P35_PID_s1" 2>/dev/null || true
    p35_kill s1 KILL
    stage s1 4:8
    p35_wait_ready 30
    check_serving stop-last
else
    echo "stop-last: skipped: the coordinator has no --step-timeout-ms"
fi

# coordinator killed: the client library notices the disconnect
p35_bg_client "$T.coord" --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json
pid=$P35_LAST
p35_wait_file "$T.coord" '"event":"piece"' 20 || p35_fail "coordinator kill: stream never started"
t0=$(now)
p35_kill coord KILL
rc=0
wait "$pid" || rc=$?
dt=$(since "$t0")
grep -q '"code":"UNAVAILABLE"' "$T.coord" || p35_fail "coordinator kill: no UNAVAILABLE error event ($(tail -n 1 "$T.coord"))"
[ $rc -ne 0 ] || p35_fail "coordinator kill: client exit 0"
awk -v d="$dt" 'BEGIN { exit !(d < 5) }' || p35_fail "coordinator kill: client took $dt s"
echo "coordinator kill: client ended with UNAVAILABLE after $dt s"
p35_coord "$M" s0 s1 -- --max-seqs 8 --max-ctx 4096
p35_wait_ready 30
check_serving coordinator-restart

p35_result "ok"
