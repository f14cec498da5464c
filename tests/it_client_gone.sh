#!/bin/sh
# A client that goes has its requests cancelled at once, queued ones
# included (2 stages, tiny Q8_0, 2 slots):
# - SIGKILL: a client holding both slots with long prompts and 4 requests
#   queued on its one connection is killed; the coordinator sees its
#   connection close (socket monitor, fd of each message), cancels all 6
#   (log: "client gone ... 6 requests cancelled (4 queued, 2 running)"),
#   the slots are free, and another client's request is served promptly
#   with the golden continuation
# - SIGSTOP: a client that stops answering (its libzmq no longer answers
#   heartbeats, as a peer behind a dead link) is cut off by the heartbeat
#   timeout (3 s) and its requests cancelled the same way
# Figures printed: time from the signal to free slots (status polled).
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-test-client
T=$P35_RUN/t
ids64 "$T.long" 48   # 3072 ids
pipe2 2 4096 --max-seqs 2 --max-ctx 4096 --max-queue 16

# case SIGNAL: 6 requests of one client, the signal, the cancel
gone_case() {
    sig=$1
    "$TC" --endpoint "$P35_EP" --prompt-ids "$T.long" -n 0 --requests 6 --timeout 60000 \
        >"$T.$sig.out" 2>&1 &
    pc=$!
    wait_for "$T.$sig.out" "submitted 6" 30 || fail "$sig: the client never submitted"
    wait_held 6 30 || fail "$sig: the coordinator does not hold the 6 requests: $(status)"
    s=$(status)
    echo "$sig: before: $(p35_field "$s" active) active, $(p35_field "$s" queued) queued, $(p35_field "$s" slots_used) slots used"
    n0=$(grep -c "client gone" "$P35_RUN/coord.log" || true)
    t0=$(now)
    kill -"$sig" $pc
    wait_held 0 30 || fail "$sig: requests still held 30 s after the client went: $(status)"
    dt=$(since "$t0")
    s=$(status)
    [ "$(p35_field "$s" slots_used)" = 0 ] || fail "$sig: slots still used: $s"
    wait_for "$P35_RUN/coord.log" "client gone.*6 requests cancelled (4 queued, 2 running)" 5 ||
        fail "$sig: no cancel of the 6 requests in the log: $(grep 'client gone' "$P35_RUN/coord.log" | tail -n 1)"
    [ "$(grep -c "client gone" "$P35_RUN/coord.log")" -gt "$n0" ] || fail "$sig: nothing logged"
    echo "$sig: 6 requests (2 running, 4 queued) cancelled, slots free ${dt} s after the signal: $(grep 'client gone' "$P35_RUN/coord.log" | tail -n 1 | sed 's/.*INFO: //')"
    # another client is served at once, exactly
    t1=$(now)
    got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 30000) ||
        fail "$sig: the next client's request failed"
    [ "$got" = "$GOLD" ] || fail "$sig: next client: greedy [$got] != golden [$GOLD]"
    echo "$sig: the next client's 16 tokens in $(since "$t1") s, golden"
    kill -KILL $pc 2>/dev/null || true
    wait $pc 2>/dev/null || true
}

gone_case KILL
gone_case STOP
ok "a client that goes has every request cancelled, queued ones included"
