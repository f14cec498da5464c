#!/bin/sh
# The tail of a stream survives the coordinator's exit: a request that
# finishes while the coordinator drains on SIGTERM reaches its client whole
# (every token, then its Final), even when the client is behind on reading
# at the moment the coordinator exits.
#   1. "behind" made certain: the request is held at the last stage
#      (SIGSTOP) until the coordinator has it, the client is SIGSTOPped,
#      the coordinator SIGTERMed; the stage goes on, the coordinator drains
#      the whole request and exits; only then does the client go on. Every
#      event is in the client's socket by then (written before the
#      coordinator exited: 150 tokens fit the socket buffers), so nothing
#      may be missing. (libzmq's ZMQ_IMMEDIATE on the client's DEALER threw
#      away what had arrived and was not read yet when the link dropped:
#      the last token and the Final, or more.)
#   2. the plain case, as an operator hits it: SIGTERM 0.5 s into a long
#      request while the client reads; a few rounds.
# Every wait is bounded; a loaded machine only makes the rounds slower:
# waits scale with QWEN35_TIME_SCALE, and the plain rounds' request
# shrinks by it, so that it still ends within the coordinator's fixed
# 30 s drain at the slower rate.
set -u
. "$(dirname "$0")/lib.sh"
setup
SCALE=$(awk -v f="${QWEN35_TIME_SCALE:-1}" 'BEGIN { print (f + 0 < 1) ? 1 : f }')
PROMPT=$G/tokens64.txt
ROUNDS_STOPPED=${ROUNDS_STOPPED:-3}
ROUNDS_PLAIN=${ROUNDS_PLAIN:-3}
COORD=""
CL=""
alive_within() {   # PID SECONDS: 0 once PID has exited, 1 if it still runs after SECONDS
    i=0
    while kill -0 "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt $(($2 * 10)) ] && return 1; sleep 0.1
    done
    return 0
}
p35_stage s0 "$M" 0:4 --threads 1
p35_stage s1 "$M" 4:8 --threads 1
S1=$P35_PID_s1
start_coord() {   # start_coord ROUND: the coordinator, serving once a short request goes through
    "$BIN/qwen35-coordinator" --model "$MODEL" --listen "ipc://$T/c.sock" \
        --stage "ipc://$T/s0.sock 0:4" --stage "ipc://$T/s1.sock 4:8" --max-ctx 4096 2>"$T/coord-$1.err" &
    COORD=$!
    i=0
    until "$BIN/qwen35-client" --endpoint "ipc://$T/c.sock" --prompt-ids "$PROMPT" -n 2 --ids \
            >/dev/null 2>"$T/warm.err"; do
        i=$((i + 1)); [ $i -gt "$(p35_scale 60)" ] && fail "round $1: no request served within $(p35_scale 30) s"; sleep 0.5
    done
}
client() {   # client ROUND N: a streaming request in the background, pid in CL
    "$BIN/qwen35-client" --endpoint "ipc://$T/c.sock" --prompt-ids "$PROMPT" -n "$2" --ignore-eos \
        --ids --timeout "$(p35_scale 20000)" --connect-timeout "$(p35_scale 3000)" >"$T/out-$1" 2>"$T/client-$1.err" &
    CL=$!
}
check() {   # check ROUND N HOW: the client got N tokens and exit 0, the coordinator exit 0
    wait "$COORD"; crc=$?; COORD=""
    alive_within "$CL" "$(p35_scale 60)" || fail "round $1: client still running $(p35_scale 60) s after the coordinator's exit"
    wait "$CL"; rc=$?; CL=""
    got=$(wc -w <"$T/out-$1")
    [ $crc -eq 0 ] || fail "round $1: coordinator exit status $crc after SIGTERM, expected 0"
    [ "$got" -eq "$2" ] && [ $rc -eq 0 ] ||
        fail "round $1 ($3): the request got $got of $2 tokens, client exit $rc: $(tr '\n' ' ' <"$T/client-$1.err")"
    # the request ended after the drain began (else the round proves nothing)
    awk -v want="(id 1): length, 64 prompt (0 cached) + $2 completion" '
        /stopping: draining requests/ { d = 1 } index($0, want) && d { ok = 1 } END { exit !ok }' "$T/coord-$1.err" ||
        fail "round $1: the coordinator did not finish the request (length, $2 tokens) while draining"
}

# 1. the client is behind (stopped) when the coordinator exits
N1=$(awk -v f="$SCALE" 'BEGIN { n = int(150 / f); print n < 40 ? 40 : n }')   # within the 30 s drain when loaded
active() { "$BIN/qwen35-client" --endpoint "ipc://$T/c.sock" --status 2>/dev/null | grep -q 'requests: 1 active'; }
r=0
while [ $r -lt "$ROUNDS_STOPPED" ]; do
    r=$((r + 1))
    start_coord "s$r"
    kill -STOP "$S1"
    client "s$r" $N1
    i=0
    until active; do
        i=$((i + 1)); [ $i -gt "$(p35_scale 100)" ] && { kill -CONT "$S1"; fail "round s$r: the coordinator never had the request"; }
        sleep 0.1
    done
    kill -STOP "$CL"
    kill -TERM "$COORD"
    kill -CONT "$S1"
    alive_within "$COORD" "$(p35_scale 60)" || fail "round s$r: coordinator still draining $(p35_scale 60) s after SIGTERM"
    before=$(wc -w <"$T/out-s$r")
    kill -CONT "$CL"
    check "s$r" $N1 "stopped at $before tokens until the coordinator had exited"
    ok "round s$r: client stopped at $before/$N1 tokens, the coordinator drained the request and exited 0; then the client got all $N1 tokens and the Final"
done

# 2. the plain case: SIGTERM 0.5 s into a long request
N2=$(awk -v f="$SCALE" 'BEGIN { print int(1900 / f) }')
r=0
while [ $r -lt "$ROUNDS_PLAIN" ]; do
    r=$((r + 1))
    start_coord "p$r"
    client "p$r" $N2
    sleep 0.5
    # on a loaded machine the client may not have reached the coordinator
    # in 0.5 s: SIGTERM only once it holds the request
    i=0
    until active; do
        i=$((i + 1)); [ $i -gt "$(p35_scale 100)" ] && fail "round p$r: the coordinator never had the request"
        sleep 0.1
    done
    kill -0 "$CL" 2>/dev/null || fail "round p$r: the request ended before SIGTERM"
    kill -TERM "$COORD"
    check "p$r" $N2 "SIGTERM 0.5 s in"
    ok "round p$r: SIGTERM 0.5 s into a $N2-token request: all $N2 tokens, exit 0"
done
