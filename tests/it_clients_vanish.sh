#!/bin/sh
# Clients that vanish (SIGKILL) have their requests cancelled within about
# a second, queued and prefilling ones included, and a legitimate request
# sent right after is served at once (2 stages, tiny Q8_0, 2 slots, long
# prompts: a 3072-token prefill takes seconds here):
# - 16 qwen35-client processes, one request each (the case where the
#   only message of a connection is read after zmq_poll: its fd must be
#   taken from the payload frame, the routing-id frame has none)
# - one qwen35-test-client connection holding 16 requests
# - qwen35-http with 16 SSE streams (its connections to the coordinator)
# Figures: time from the SIGKILL to nothing held, the legit request's time.
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-test-client
T=$P35_RUN/t
ids64 "$T.long" 48   # 3072 ids
CANCEL_S=1.5   # from the signal to nothing held (status polls included; scaled by wait_held)
LEGIT_S=$(p35_scale 4)      # the legit request's 16 tokens, after the signal
pipe2 2 4096 --max-seqs 2 --max-ctx 4096 --max-queue 64

# check NAME T0: nothing held within CANCEL_S of T0, slots free, and a
# legit request served within LEGIT_S, golden
check() {
    if wait_held 0 "$CANCEL_S"; then
        echo "$1: every request cancelled $(since "$2") s after the SIGKILL"
    else
        fail "$1: requests still held $(p35_scale $CANCEL_S) s after the SIGKILL: $(status | grep -o "\"active\":[0-9]*,\"queued\":[0-9]*")"
    fi
    t1=$(now)
    got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 60000) ||
        fail "$1: the legit request failed"
    dt=$(since "$t1")
    [ "$got" = "$GOLD" ] || fail "$1: legit request: greedy [$got] != golden [$GOLD]"
    awk -v d="$dt" -v l="$LEGIT_S" 'BEGIN { exit !(d <= l) }' ||
        fail "$1: the legit request took $dt s (at most $LEGIT_S)"
    echo "$1: the legit request's 16 tokens in $dt s, golden"
    wait_held 0 10 || fail "$1: still held: $(status)"
    st=$(status)
    [ "$(p35_field "$st" slots_used)" = 0 ] || fail "$1: slots still used: $st"
}

# vanish LABEL NAME PID...: once the coordinator holds the 16 requests,
# the PIDs are SIGKILLed; then check NAME
vanish() {
    _lab=$1 _name=$2
    shift 2
    wait_held 16 30 || fail "$_lab: not all held: $(status)"
    t0=$(now)
    kill -KILL "$@"
    check "$_name" "$t0"
}

# 16 processes, one request each
pids=""
for i in $(seq 1 16); do
    "$BIN/qwen35-client" --endpoint "$P35_EP" --prompt-ids "$T.long" -n 0 --ignore-eos --json \
        --timeout 120000 >"$T.c$i" 2>&1 &
    pids="$pids $!"
done
P35_CLIENTS="$P35_CLIENTS $pids"
# shellcheck disable=SC2086
vanish "16 clients" "16 client processes (qwen35-client)" $pids

# one connection, 16 requests
"$TC" --endpoint "$P35_EP" --prompt-ids "$T.long" -n 0 --requests 16 --timeout 120000 >"$T.tc" 2>&1 &
pc=$!
P35_CLIENTS="$P35_CLIENTS $pc"
wait_for "$T.tc" "submitted 16" 30 || fail "test client: never submitted"
vanish "test client" "one connection with 16 requests" $pc
wait_for "$P35_RUN/coord.log" "client gone.*16 requests cancelled (14 queued, 2 running)" 5 ||
    fail "test client: no cancel of the 16 in the log: $(grep 'client gone' "$P35_RUN/coord.log" | tail -n 1)"

# qwen35-http with 16 streams
if [ -x "$BIN/qwen35-http" ] && command -v curl >/dev/null; then
    http_front http
    ids=$(tr '\n' ',' <"$T.long" | sed 's/,$//')
    printf '{"prompt":[%s],"max_tokens":4000,"ignore_eos":true,"stream":true}' "$ids" >"$T.body"
    cp=""
    for i in $(seq 1 16); do
        curl -sN "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
            --data-binary @"$T.body" >"$T.h$i" 2>&1 &
        cp="$cp $!"
    done
    P35_CLIENTS="$P35_CLIENTS $cp"
    vanish http "HTTP front (qwen35-http), 16 SSE streams" "$P35_PID_http"
    wait "$P35_PID_http" 2>/dev/null || true
    track http ""
    # shellcheck disable=SC2086
    kill -KILL $cp 2>/dev/null || true
fi
ok "vanished clients' requests are cancelled at once"
