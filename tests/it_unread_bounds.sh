#!/bin/sh
# Output toward slow readers is bounded per connection and in total, not
# only per request (it_slow_reader.sh): 2 stages, tiny Q8_0 (a logits row
# 2 KiB, a request of a 1024-token prompt's and every answer position's
# logits ~4 MiB), max-unread-mb at its
# default (64), max-unread-conn-mb 2, max-unread-total-mb 3:
# - one connection with 2 such requests, not read for 8 s: they end with
#   RESOURCE_EXHAUSTED naming max-unread-conn-mb, each after well under
#   its 4 MiB (the connection's 2 MiB), while a client that reads is served
#   the golden continuation
# - two slow connections with one request each (1.5 MiB each when the
#   total's 3 MiB is reached, under the per-connection bound): ended
#   naming max-unread-total-mb, and a reader beside them is never ended
# - the defaults fit a small machine: max-unread-total-mb 256 and
#   max-client-requests 1024 (not 0 = unlimited) in --help
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-test-client
T=$P35_RUN/t
# a 1024-token prompt: its logits rows (2 MiB) come in prefill steps, fast
# even on a loaded machine, and pass the bounds before decoding starts
ids64 "$T.p1024" 16
pipe2 4 2048 --max-seqs 4 --max-ctx 2048 --max-unread-conn-mb 2 --max-unread-total-mb 3 ${UNREAD_EXTRA:-}

slow() {   # slow OUT K: K logits requests on one connection, not read until $T.go exists
    rm -f "$T.go"
    timeout "$(p35_scale 300)" "$TC" --endpoint "$P35_EP" --prompt-ids "$T.p1024" -n 0 --logits \
        --requests "$2" --pause-ms "$(p35_scale 90000)" --resume-file "$T.go" \
        --timeout "$(p35_scale 180000)" >"$1" 2>&1 &
}
ended() {   # ended PATTERN N: until the coordinator logged N request ends matching PATTERN
    _e=$(( $(date +%s) + $(p35_scale 60) ))
    while [ "$(grep -c "$1" "$P35_RUN/coord.log" || true)" -lt "$2" ]; do
        [ "$(date +%s)" -lt $_e ] || { fail "not $2 requests ended ($1) in $(p35_scale 60) s"; return; }
        sleep 0.1
    done
}
reader() {   # a client that reads: 16 greedy tokens, golden
    got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout "$(p35_scale 30000)") ||
        fail "$1: the reader's request failed"
    [ "$got" = "$GOLD" ] || fail "$1: reader: greedy [$got] != golden [$GOLD]"
}
rows_ok() {   # rows_ok FILE MAX: every request ended with an error after at most MAX rows
    n=$(grep -c "error RESOURCE_EXHAUSTED" "$1" || true)
    [ "$n" -eq "$3" ] || fail "$2: $n of $3 requests ended RESOURCE_EXHAUSTED: $(tail -n 2 "$1")"
    for r in $(sed -n 's/.*, \([0-9]*\) logit rows).*/\1/p' "$1"); do
        [ "$r" -le "$4" ] || fail "$2: a request got $r logit rows before its end (at most $4)"
    done
}

# per connection ("per request" figures stay far below max-unread-mb 64)
slow "$T.conn" 2
pc=$!
sleep 1
reader "one slow connection"
ended "max-unread-conn-mb 2" 2
touch "$T.go"
rc=0
wait $pc || rc=$?
[ $rc -eq 1 ] || fail "slow connection: exit $rc, expected 1 ($(tail -n 1 "$T.conn"))"
grep -q "output not read: .* MiB sent on this connection and not read (max-unread-conn-mb 2)" "$T.conn" ||
    fail "slow connection: no error naming max-unread-conn-mb: $(tail -n 2 "$T.conn")"
rows_ok "$T.conn" "slow connection" 2 1100
echo "slow connection: $(grep -c RESOURCE_EXHAUSTED "$T.conn") requests ended: $(grep -m1 RESOURCE_EXHAUSTED "$T.conn" | cut -c1-200)"
st=$(p35_client --status --json --timeout 5000)
[ "$(p35_field "$st" slots_used)" = 0 ] || fail "slow connection: slots still used: $st"

# in total: two slow connections, a reader beside them
slow "$T.tot1" 1
p1=$!
slow "$T.tot2" 1
p2=$!
sleep 1
reader "two slow connections"
ended "RESOURCE_EXHAUSTED: output not read" 4
touch "$T.go"
wait $p1 || true
wait $p2 || true
cat "$T.tot1" "$T.tot2" >"$T.tot"
grep -q "in total (max-unread-total-mb 3)" "$T.tot" ||
    fail "two slow connections: no error naming max-unread-total-mb: $(tail -n 1 "$T.tot1"); $(tail -n 1 "$T.tot2")"
rows_ok "$T.tot" "two slow connections" 2 1100
echo "two slow connections: $(grep -m1 'in total' "$T.tot" | cut -c1-220)"

# defaults
h=$("$BIN/qwen35-coordinator" --help)
printf '%s\n' "$h" | grep -q -- "--max-unread-total-mb N.*(default 256;" || fail "max-unread-total-mb default is not 256"
printf '%s\n' "$h" | grep -q -- "--max-client-requests N.*(default 1024;" || fail "max-client-requests default is not 1024"
ok "unread output bounded per connection and in total"
