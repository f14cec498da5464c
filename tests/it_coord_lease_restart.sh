#!/bin/sh
# A coordinator restarted while its stages are still leased to the one
# that died serves; it never exits for that (2 stages, tiny Q8_0):
# - a silent second peer stays connected to stage 0 (a refused
#   coordinator, SIGSTOPped), so that the stage still counts a peer when
#   the owner is SIGKILLed: only the owner's own connection tells that it
#   is gone. A new coordinator started at once must serve (golden
#   continuation) within the time scale, not exit with "owned by"
# - the same, with stage 0 SIGSTOPped across the kill and the restart (it
#   cannot notice anything until SIGCONT; the new coordinator's first Hello
#   may be answered before the old connection's end is read): the new one
#   proves the old owner gone (same host, its pid no longer alive) or
#   waits for the lease, and serves
# - a second coordinator while the owner is alive is still refused and
#   exits naming the owner (it_pipeline_owner checks the details)
set -eu
. "$(dirname "$0")/lib.sh"
setup
p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 4 --max-ctx 512
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 512
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 512
p35_wait_ready 30

# a peer that connects to both stages and then stays silent
"$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/c.sock" \
    --stage "ipc://$P35_RUN/s0.sock 0:4" --stage "ipc://$P35_RUN/s1.sock 4:8" \
    --max-seqs 4 --max-ctx 512 >"$P35_RUN/c.log" 2>&1 &
C=$!
P35_CLIENTS="$P35_CLIENTS $C"
wait_for "$P35_RUN/c.log" "owned by coordinator pid" 20 ||
    fail "the second coordinator was not refused: $(tail -n 2 "$P35_RUN/c.log")"
kill -STOP $C

# restart_case NAME: SIGKILL the coordinator, start it again at once, and
# check that it serves the golden continuation
restart_case() {
    old=$P35_PID_coord
    t0=$(date +%s.%N)
    p35_kill coord KILL
    p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 512
    [ "${2:-}" = stop ] && { sleep 1; kill -CONT "$P35_PID_s0"; }
    end=$(( $(date +%s) + $(p35_scale 40) ))
    until p35_client --status --json --timeout 2000 2>/dev/null | grep -q '"up":true' &&
          ! p35_client --status --json --timeout 2000 2>/dev/null | grep -q '"up":false'; do
        if ! kill -0 "$P35_PID_coord" 2>/dev/null; then
            fail "$1: the restarted coordinator exited: $(grep ERROR "$P35_RUN/coord.log" | tail -n 1)"
            return
        fi
        [ "$(date +%s)" -lt $end ] || { fail "$1: not serving after $(p35_scale 40) s"; return; }
        sleep 0.2
    done
    dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout "$(p35_scale 30000)") ||
        fail "$1: the restarted coordinator's request failed"
    [ "$got" = "$GOLD" ] || fail "$1: greedy [$got] != golden [$GOLD]"
    kill -0 "$P35_PID_coord" 2>/dev/null || fail "$1: the restarted coordinator exited"
    how=$(grep -h "pid $old .*disconnected: its lease ended\|lease handed to .*pid $old\|pid $old.*no longer runs\|waiting for the lease of coordinator pid $old" \
        "$P35_RUN/s0.log" "$P35_RUN/coord.log" | sed 's/^[^:]*: [A-Z]*: //' | tr '\n' ';' | cut -c1-400)
    echo "$1: old owner pid $old SIGKILLed, the new coordinator serves ${dt} s later (golden): $how"
}
restart_case "owner killed, a silent peer still connected"
kill -STOP "$P35_PID_s0"
restart_case "owner killed while stage 0 is stopped" stop
kill -CONT "$P35_PID_s0" 2>/dev/null || true

# a live owner: still refused (exit non-zero, the owner named)
kill -KILL $C
wait $C 2>/dev/null || true
rc=0
timeout "$(p35_scale 60)" "$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/d.sock" \
    --stage "ipc://$P35_RUN/s0.sock 0:4" --stage "ipc://$P35_RUN/s1.sock 4:8" \
    --max-seqs 4 --max-ctx 512 >"$P35_RUN/d.log" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a second coordinator beside a live owner: exit $rc"
grep -q "owned by coordinator pid $P35_PID_coord" "$P35_RUN/d.log" ||
    fail "live owner: not named: $(tail -n 1 "$P35_RUN/d.log")"
echo "live owner: a second coordinator exits $rc: $(grep -o 'owned by [^;]*' "$P35_RUN/d.log" | head -n 1)"
ok "a coordinator restarted within its stages' lease serves"
