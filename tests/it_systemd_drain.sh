#!/bin/sh
# SIGTERM with a request in flight, each daemon run by qwen35-fake-systemd:
# the process sends STOPPING=1, the request either completes (every token)
# or ends with an explicit error on the client, and the daemon exits 0.
#   1. coordinator stopped mid-generation;
#   2. the last stage stopped mid-generation (the step in flight is answered);
#   3. a coordinator hung on purpose (test hook) is caught by the watchdog.
# Also, while they generate: every daemon pings the watchdog at least every
# half period (the pings come from the serving loops, which stay responsive
# under load), and nothing is logged per token at the default level.
set -u
. "$(dirname "$0")/lib.sh"
setup
N=1000
ulimit -c 0   # the watchdog's SIGABRT leaves no core file
WD_USEC=2000000
# run NAME CMD...: under the fake systemd (watchdog 2 s), pid in $LAST
run() { _n=$1; shift; under_systemd "$_n" $WD_USEC "$@"; }
start_coord() {   # start_coord NAME
    run "$1" "$BIN/qwen35-coordinator" --model "$MODEL" --listen "ipc://$T/coord.sock" \
        --stage "ipc://$T/s0.sock 0:4" --stage "ipc://$T/s1.sock 4:8" --max-ctx 4096
    COORD=$LAST
    # ready to serve once a short request goes through
    i=0
    until "$BIN/qwen35-client" --endpoint "ipc://$T/coord.sock" --prompt-ids "$T/prompt" \
            -n 2 --ids >/dev/null 2>&1; do
        i=$((i + 1)); [ $i -gt 30 ] && fail "$1: no request served within 30 s"; sleep 1
    done
}
# in_flight NAME FAKE_SYSTEMD_PID: starts a long request, stops the daemon
# while it runs, checks the outcome
in_flight() {
    name=$1 victim=$2
    "$BIN/qwen35-client" --endpoint "ipc://$T/coord.sock" --prompt-ids "$T/prompt" \
        -n $N --ignore-eos --ids --timeout 20000 >"$T/$name.out" 2>"$T/$name.client.err" &
    cl=$!
    sleep 0.5   # the daemon's life spans a few watchdog pings (checked below)
    # in flight once its first token streamed (the sleep alone proves nothing on a loaded box)
    wait_for "$T/$name.out" '[0-9]' 30 || fail "$name: no token streamed within 30 s"
    kill -0 "$cl" 2>/dev/null || fail "$name: the request ended before SIGTERM (not in flight)"
    kill -TERM "$victim"
    wait "$victim"; vrc=$?
    wait "$cl"; crc=$?
    [ $vrc -eq 0 ] || fail "$name: daemon exit status $vrc after SIGTERM, expected 0"
    awk '/ SIGNAL 15$/ { s = NR } / STOPPING=1$/ && s && NR > s { st = 1 } / EXIT 0$/ { e = 1 }
         END { exit !(st && e) }' "$T/$name.log" || fail "$name: no STOPPING=1 then EXIT 0"
    got=$(wc -w < "$T/$name.out")
    if [ $crc -eq 0 ]; then
        [ "$got" -eq $N ] || fail "$name: client exit 0 with $got of $N tokens"
        ok "$name: STOPPING=1, exit 0; the request in flight completed ($N tokens)"
    else
        [ -s "$T/$name.client.err" ] || fail "$name: client failed (exit $crc) without an error message"
        ok "$name: STOPPING=1, exit 0; the request in flight ended with: $(head -n 1 "$T/$name.client.err")"
    fi
}

echo "1 2 3 4 5 6 7 8" > "$T/prompt"
run s0 "$BIN/qwen35-stage" --model "$MODEL" --layers 0:4 --bind "ipc://$T/s0.sock" --threads 1
run s1 "$BIN/qwen35-stage" --model "$MODEL" --layers 4:8 --bind "ipc://$T/s1.sock" --threads 1
S1=$LAST
start_coord coord1
in_flight coord1 "$COORD"
start_coord coord2
in_flight s1 "$S1"

# a coordinator hung on purpose stops pinging: the watchdog fires
QWEN35_TEST_HOOKS=1 run coord3 "$BIN/qwen35-coordinator" --model "$MODEL" --listen "ipc://$T/coord3.sock" \
    --stage "ipc://$T/s0.sock 0:4" --stage "ipc://$T/s1.sock 4:8"
sleep 1
kill -USR1 "$LAST"
wait "$LAST"
grep -q ' WATCHDOG_TIMEOUT$' "$T/coord3.log" && grep -q ' EXIT signal 6$' "$T/coord3.log" \
    || fail "coord3: hung on purpose, but the watchdog did not fire"
ok "coord3: hung on purpose (SIGUSR1), pings stopped, the watchdog fired"

# watchdog cadence of every daemon, READY to exit, through the generations
for n in s0 s1 coord1 coord2; do
    # pings are due every half period; a loaded machine may stretch one gap,
    # but any gap under the full period keeps the watchdog from firing
    res=$(awk -v half=$((WD_USEC * 9 / 10)) '
        /READY=1$/ { r = 1 }
        / STOPPING=1$/ { r = 0 }
        r && / WATCHDOG=1$/ { if (p != "") { g = ($1 - p) * 1e6; if (g > max) max = g } p = $1; k++ }
        END { printf "%d %.0f %s\n", k, max, (k >= 2 && max <= half) ? "ok" : "bad" }' "$T/$n.log")
    set -- $res
    [ "$3" = ok ] || fail "$n: $1 watchdog pings, longest gap $2 us (limit $((WD_USEC * 9 / 10)) us, 0.9 of the watchdog period)"
    ok "$n: WATCHDOG=1 every <= $2 us while serving ($1 pings)"
done
# one line per event, not per token: ~2000 tokens generated in all
for n in s0 s1 coord1 coord2; do
    lines=$(wc -l < "$T/$n.err")
    [ "$lines" -le 40 ] || fail "$n: $lines log lines for ~2000 tokens at the default level"
done
ok "log volume at the default level: $(cat "$T"/s0.err "$T"/s1.err "$T"/coord1.err "$T"/coord2.err | wc -l) lines in all"
