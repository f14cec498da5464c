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
# - SIGSTOP of a stage for 10 s (the step deadline or the heartbeat
#   timeout declares it lost)
# - SIGTERM of a stage with 4 requests in flight (it says it is leaving,
#   then restarts)
# - a rolling restart of both stages under load (SIGTERM, restart, each)
# - a stage that does not come back within replay-wait: errors naming the
#   last token delivered, within the bound
# - SIGKILL of the coordinator mid-stream, restarted: the clients resume
#   their streams there, identical; not restarted: an error within the
#   client's timeout
set -eu
. "$(dirname "$0")/lib.sh"
setup
. "$(dirname "$0")/streams4.sh"

stage() { p35_stage "$1" "$M" "$2" --threads 1 --max-seqs 8 --max-ctx 1024; }
stage s0 0:4
stage s1 4:8
p35_coord "$M" s0 s1 -- --max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms 20000
p35_wait_ready 30

refs4

# check4 NAME T0 [REBUILDS]: each stream ends within 90 s, exit 0, equal
# to its reference, and the fault rebuilt sequences
check4() {
    wait4 "$1" 90
    _r=$(rebuilds)
    [ "$_r" -ge $((R0 + ${3:-1})) ] ||
        fail "$1: the fault rebuilt nothing ($_r rebuilds, $R0 before): it hit no stream"
    R0=$_r
    echo "$1: 4 streams identical to their undisturbed runs, $(since "$2") s after the fault"
}
# rebuilds: times the coordinator rebuilt sequences after a loss
rebuilds() { grep -c 'rebuilding [1-9]' "$P35_RUN/coord.log" || true; }
R0=0

start4 kill-last
mid_decode kill-last
t0=$(now)
p35_kill s1 KILL
sleep 1
stage s1 4:8
check4 kill-last "$t0"
# --status counts the rebuilt sequences (qwen35_replays_total in /metrics)
rp=$(p35_field "$(p35_client --status --json)" replays)
[ "${rp:-0}" -ge 1 ] || fail "kill-last: --status counts ${rp:-?} replays"
echo "kill-last: --status counts $rp sequences replayed"

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
    [ "$(nids "$T.kill-prefill$i")" -eq 0 ] || fail "kill-prefill: stream $i had started"
done
t0=$(now)
p35_kill s1 KILL
stage s1 4:8
check4 kill-prefill "$t0"

start4 stop
mid_decode stop
t0=$(now)
# a silent stage is lost by whichever notices first: the step deadline
# ("no reply to a ...") or the link's heartbeat timeout ("disconnected");
# both are 3 s here, and on a loaded machine either may win
silent_lost() { grep -cE 'lost: (no reply to a|disconnected)' "$P35_RUN/coord.log" || true; }
lost0=$(silent_lost)
p35_kill s1 STOP
sleep 10
# held 10 s, and on until the coordinator has declared it lost (its
# deadline adapts to measured step times, long on a loaded machine)
_end=$(( $(date +%s) + 30 ))
while [ "$(silent_lost)" -le "$lost0" ] && [ "$(date +%s)" -lt "$_end" ]; do sleep 0.2; done
[ "$(silent_lost)" -gt "$lost0" ] ||
    fail "stop: the coordinator never declared the stopped stage lost (deadline or heartbeat) in 40 s"
kill -CONT "$P35_PID_s1"
check4 stop "$t0"

# SIGTERM: the stage says it is leaving (StageReply.leaving) before it
# goes; the coordinator gives it up at that message, not at the
# disconnect or a deadline. left NAME N: N such losses since line $L0 of
# the coordinator's log, no other kind, and the longest pause a stream saw
# (the coordinator's "stream resumed after" lines)
left() {
    _log=$(tail -n +$((L0 + 1)) "$P35_RUN/coord.log")
    _n=$(printf '%s\n' "$_log" | grep -c 'lost: said it is leaving' || true)
    [ "$_n" -ge "$2" ] || fail "$1: $_n stages said they were leaving, expected $2"
    printf '%s\n' "$_log" | grep 'lost: ' | grep -v 'said it is leaving' | head -n 1 |
        grep . && fail "$1: a stage was lost otherwise than by leaving"
    _p=$(longest_pause "$L0")
    echo "$1: $_n stages left on SIGTERM; the longest pause a stream saw: ${_p:-?} s"
}

# term_s0 NAME: 4 streams NAME, stage 0 SIGTERMed mid-decode and started
# again; L0: the coordinator's log lines before, t0: when
term_s0() {
    start4 "$1"
    mid_decode "$1"
    L0=$(wc -l <"$P35_RUN/coord.log")
    t0=$(now)
    p35_kill s0 TERM
    stage s0 0:4
}

term_s0 term
check4 term "$t0"
left term 1

term_s0 rolling
p35_wait_ready 30
for i in 1 2 3 4; do wait_ids "$T.rolling$i" 16 30 || true; done
p35_kill s1 TERM
stage s1 4:8
check4 rolling "$t0" 2
left rolling 2

# kill_mid OUT TIMEOUT_MS VICTIM LABEL: a stream of the 64 prompt ids (json
# to OUT), VICTIM SIGKILLed once it streams; the client's exit status in
# rc, the seconds from the kill to its end in dt
kill_mid() {
    p35_bg_client "$1" --prompt-ids "$T.p64" -n 0 --ignore-eos --json --timeout "$2"
    pid=$P35_LAST
    wait_for "$1" '"event":"piece"' 20 || fail "$4: stream never started"
    t0=$(now)
    p35_kill "$3" KILL
    rc=0
    wait "$pid" || rc=$?
    dt=$(since "$t0")
}

# not back in time: the requests end with an error naming the last token
p35_kill coord TERM
p35_coord "$M" s0 s1 -- --max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms 2000
p35_wait_ready 30
kill_mid "$T.gone" 30000 s1 gone
[ $rc -ne 0 ] || fail "gone: client exit 0 without its stage"
grep -q '"code":"UNAVAILABLE".*tokens were delivered (the last at index' "$T.gone" ||
    fail "gone: no UNAVAILABLE error naming the last token ($(tail -n 1 "$T.gone"))"
awk -v d="$dt" 'BEGIN { exit !(d < 10) }' || fail "gone: the error took $dt s (replay wait 2 s)"
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
[ $cut -gt 0 ] || fail "coord-kill: every stream had ended before the kill"
sleep 1
# shellcheck disable=SC2086
p35_coord "$M" s0 s1 -- $coord_opts
R0=$(rebuilds)   # a new log: resumes are not rebuilds
check4 coord-kill "$t0" 0

# killed and not back: the client ends with UNAVAILABLE after its timeout
kill_mid "$T.coord" 3000 coord "coordinator kill"
grep -q '"code":"UNAVAILABLE".*not resumed within 3000 ms' "$T.coord" ||
    fail "coordinator gone: no UNAVAILABLE error event ($(tail -n 1 "$T.coord"))"
[ $rc -ne 0 ] || fail "coordinator gone: client exit 0"
awk -v d="$dt" 'BEGIN { exit !(d < 10) }' || fail "coordinator gone: client took $dt s"
echo "coordinator gone: client ended with UNAVAILABLE after $dt s (--timeout 3000)"

ok "stage faults cost a pause, never a request"
