#!/bin/sh
# One coordinator per stage (2 stages, tiny Q8_0):
# - a second coordinator for stages another one owns is refused at its
#   handshake, naming the owner (pid, host, since when), and exits
# - started with --takeover it takes the stages and serves (golden
#   continuation); the first is fenced out: its steps are refused, its
#   stream ends with an error, it never serves again
set -eu
. "$(dirname "$0")/lib.sh"
setup
p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 4 --max-ctx 512
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 512
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 512 --replay-wait-ms 2000
p35_wait_ready 30
A=$P35_PID_coord
EP_A=$P35_EP

second() {   # second LOG [options]: a coordinator on its own endpoint
    _log=$1
    shift
    "$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/b.sock" \
        --stage "ipc://$P35_RUN/s0.sock 0:4" --stage "ipc://$P35_RUN/s1.sock 4:8" \
        --max-seqs 4 --max-ctx 512 "$@" >"$_log" 2>&1 &
    B=$!
}

second "$P35_RUN/b1.log"
i=0
while kill -0 $B 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
if kill -0 $B 2>/dev/null; then
    fail "the second coordinator still runs after 30 s"
    kill -KILL $B
fi
rc=0
wait $B || rc=$?
[ $rc -ne 0 ] || fail "the second coordinator exited 0"
grep -q "owned by coordinator pid $A on .* since 20" "$P35_RUN/b1.log" ||
    fail "the refusal does not name the owner (pid $A): $(tail -n 2 "$P35_RUN/b1.log")"
echo "second coordinator: refused, exit $rc: $(grep -o 'owned by [^;]*' "$P35_RUN/b1.log" | head -n 1)"

# the first still serves
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 20000) ||
    fail "the owner stopped serving after the refusal"
[ "$got" = "$GOLD" ] || fail "owner: greedy [$got] != golden [$GOLD]"

# a stream on the first, then a takeover
p35_bg_client "$P35_RUN/a.out" --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json --timeout 20000
pa=$P35_LAST
wait_for "$P35_RUN/a.out" '"event":"piece"' 20 || fail "stream on the owner never started"
second "$P35_RUN/b2.log" --takeover
P35_EP="ipc://$P35_RUN/b.sock"
p35_wait_ready 30
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 20000) ||
    fail "the coordinator that took over does not serve"
[ "$got" = "$GOLD" ] || fail "after the takeover: greedy [$got] != golden [$GOLD]"
echo "takeover: the new coordinator serves, greedy continuation exact"
rc=0
i=0
while kill -0 $pa 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
wait $pa || rc=$?
[ $rc -ne 0 ] || fail "the fenced coordinator's stream ended without an error"
grep -q '"event":"error"\|"finish":"error"' "$P35_RUN/a.out" ||
    fail "fenced: no error event ($(tail -n 1 "$P35_RUN/a.out"))"
grep -q "refused our step: not the owner" "$P35_RUN/coord.log" ||
    fail "fenced: the old coordinator's steps were not refused ($(tail -n 3 "$P35_RUN/coord.log"))"
echo "fenced: the old coordinator's stream ended: $(grep -o '"message":"[^"]*"' "$P35_RUN/a.out" | head -n 1 | cut -c1-150)"
P35_EP=$EP_A
st=$(p35_client --status --json --timeout 3000) || true
printf '%s' "$st" | grep -q '"up":true' && fail "the fenced coordinator still shows a stage up: $st"
kill -TERM $B
wait $B || true

# an ipc path a live stage listens on is refused (libzmq would take it
# over silently); a stale file (a killed stage's) is replaced, as every
# restart in it_pipeline_faults shows
rc=0
timeout 60 "$BIN/qwen35-stage" --model "$M" --layers 0:4 --bind "ipc://$P35_RUN/s0.sock" \
    --threads 1 >"$P35_RUN/dup.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a second stage on a live ipc path: exit $rc"
grep -q "in use by a running process" "$P35_RUN/dup.log" ||
    fail "ipc path in use: no clear message ($(tail -n 1 "$P35_RUN/dup.log"))"
echo "ipc path in use: refused, exit $rc: $(grep -o 'bind [^ ]*: the path is in use[^(]*' "$P35_RUN/dup.log")"

# start-up errors a restart cannot fix exit 78 (RestartPreventExitStatus=78)
mkfifo "$P35_RUN/fifo.gguf"
rc=0
timeout 20 "$BIN/qwen35-stage" --model "$P35_RUN/fifo.gguf" --layers 0:4 --bind "ipc://$P35_RUN/f.sock" \
    >"$P35_RUN/fifo.log" 2>&1 || rc=$?
[ $rc -eq 78 ] || fail "a FIFO as model: exit $rc, expected 78 ($(tail -n 1 "$P35_RUN/fifo.log"))"
grep -q "not a regular file (a FIFO)" "$P35_RUN/fifo.log" || fail "a FIFO as model: no clear message"
rc=0
timeout 60 "$BIN/qwen35-stage" --model "$M" --layers 4:12 --bind "ipc://$P35_RUN/r.sock" \
    >"$P35_RUN/range.log" 2>&1 || rc=$?
[ $rc -eq 78 ] || fail "layers past the model: exit $rc, expected 78 ($(tail -n 1 "$P35_RUN/range.log"))"
echo "unfixable start-up errors: exit 78 (FIFO as model, layers 4:12 of 8)"
ok "one coordinator per stage"
