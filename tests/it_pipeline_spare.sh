#!/bin/sh
# Spares (--spare): a stage process serving the same range as a stage of
# the chain, handshaken and idle; when that stage is lost the coordinator
# promotes the spare at once instead of waiting for a restart (2 stages,
# tiny Q8_0, a replay wait of 30 s that nothing here should come near).
# - every spare is shown up in --status, as the spare of its stage; a
#   spare serving other weights or with fewer slots than the chain is
#   shown with its problem, never promoted
# - SIGKILL of the last stage mid-decode, nothing restarted: its spare
#   takes over, the 4 streams complete identical to their undisturbed
#   runs, the pause they saw well below the replay wait (printed)
# - the killed stage restarted: it is the spare now
# - SIGTERM of the promoted stage with 4 streams in flight: it says it is
#   leaving, the spare (the first one, back) takes over at once
# - SIGKILL of the first stage: the good spare of its range is promoted,
#   not the one with other weights
# - SIGSTOP of the promoted first stage: its step deadline (3 s) declares
#   it lost, the spare (the killed one, restarted) takes over; continued,
#   the stopped one is the spare
# P35_SPARE_SPLIT (4): where the 2 stages split (e.g. 3.5: after layer 3's
# mixer; a spare matches its stage's half-layer range).
set -eu
. "$(dirname "$0")/lib.sh"
setup
SPLIT=${P35_SPARE_SPLIT:-4}
. "$(dirname "$0")/streams4.sh"
WAIT_MS=30000

stage() { p35_stage "$1" "${3:-$M}" "$2" --threads 1 --max-seqs 8 --max-ctx 1024; }
stage s0 0:$SPLIT
stage s0x 0:$SPLIT "$G/models/tiny-Q4_K_M.gguf"   # other weights, same shape
stage s0b 0:$SPLIT
stage s1 $SPLIT:8
stage s1b $SPLIT:8
p35_stage s1s "$M" $SPLIT:8 --threads 1 --max-seqs 4 --max-ctx 1024   # fewer slots than the chain
ep() { echo "ipc://$P35_RUN/$1.sock"; }
# s0x and s0b are bare: the coordinator learns their ranges at the handshake
p35_coord "$M" s0 s1 -- --spare "$(ep s0x)" --spare "$(ep s0b)" --spare "$(ep s1s)" --spare "$(ep s1b) $SPLIT:8" \
    --max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms $WAIT_MS

status() { p35_client --status --json --connect-timeout 300 --timeout 2000 2>/dev/null || true; }
# spare_ok NAME STAGE SECONDS: until --status shows spare NAME up, standing in for STAGE
spare_ok() {
    _end=$(( $(date +%s) + $3 ))
    until status | grep -o '"spares":.*' | grep -q "\"endpoint\":\"$(ep "$1")\",\"layers\":\[[0-9.]*,[0-9.]*\],\"up\":true,[^}]*\"spare_for\":$2[,}]"; do
        [ "$(date +%s)" -ge "$_end" ] && return 1
        sleep 0.2
    done
}
# the chain up and the two good spares ready
_end=$(( $(date +%s) + 30 ))
chain_up() {   # both stages up (the part of --status before the spares)
    _c=$(status | sed 's/"spares":.*//')
    [ "$(printf '%s' "$_c" | grep -o '"up":true' | wc -l)" -eq 2 ]
}
until chain_up && spare_ok s0b 0 1 && spare_ok s1b 1 1; do
    [ "$(date +%s)" -ge "$_end" ] && fail "chain and spares not ready after 30 s: $(status)"
    sleep 0.2
done
st=$(status)
printf '%s' "$st" | grep -o '"spares":.*' | grep -q "\"endpoint\":\"$(ep s0x)\",[^}]*\"up\":false,[^}]*\"problem\":\"serves another model" ||
    fail "the spare with other weights is not shown down with its problem: $st"
# s1s: handshaken maybe before the chain's capacity was fixed, then found too small
_end=$(( $(date +%s) + 30 ))
until status | grep -o '"spares":.*' | grep -q "\"endpoint\":\"$(ep s1s)\",[^}]*\"up\":false,[^}]*\"problem\":\"is smaller (max_seqs 4"; do
    [ "$(date +%s)" -ge "$_end" ] && { fail "the spare with 4 slots is not shown down as smaller: $(status)"; break; }
    sleep 0.2
done
txt=$(p35_client --status)
printf '%s\n' "$txt" | grep -q "^spare .*s1b.sock .*$SPLIT:8 .*yes .*spare, for stage 1" ||
    fail "--status does not show s1b as the spare of stage 1: $txt"
echo "spares: s0b (stage 0) and s1b (stage 1) ready; s0x refused: $(printf '%s' "$st" |
    grep -o '"problem":"serves another model[^"]*' | cut -c12-80)"

refs4

# begin NAME: the four streams, mid-decode; L0: the log's length then
begin() {
    start4 "$1"
    mid_decode "$1"
    L0=$(wc -l <"$P35_RUN/coord.log")
}
# check4 NAME T0 PROMOTED: each stream ends within 60 s, exit 0, equal to
# its reference; the spare PROMOTED took over (--status counts the
# promotion and the rebuilt sequences); the pause was short
PROMOTIONS=0 REPLAYS=0
check4() {
    wait4 "$1" 60
    _log=$(tail -n +$((L0 + 1)) "$P35_RUN/coord.log")
    printf '%s\n' "$_log" | grep -q "spare $(ep "$3") promoted in place of" ||
        fail "$1: $3 was not promoted: $(printf '%s\n' "$_log" | grep -i 'spare\|lost' | head -n 3)"
    _n=$(printf '%s\n' "$_log" | grep -c 'stream resumed after' || true)
    [ "$_n" -ge 1 ] || fail "$1: no stream was rebuilt (the fault hit nothing)"
    _st=$(status)
    _pr=$(p35_field "$_st" promotions) _rp=$(p35_field "$_st" replays)
    [ "${_pr:-0}" -gt "$PROMOTIONS" ] && [ "${_rp:-0}" -ge $((REPLAYS + _n)) ] ||
        fail "$1: --status counts ${_pr:-?} promotions (before $PROMOTIONS), ${_rp:-?} replays (before $REPLAYS, $_n resumed)"
    PROMOTIONS=$_pr REPLAYS=$_rp
    _p=$(longest_pause "$L0")
    # well below the replay wait: a loaded machine gets a generous bound
    awk -v p="${_p:-99}" -v w=$WAIT_MS 'BEGIN { exit !(p * 1000 < w / 4) }' ||
        fail "$1: a stream paused ${_p:-?} s (replay wait $((WAIT_MS / 1000)) s): no faster than a restart"
    echo "$1: 4 streams identical, $_n rebuilt on $3; the longest pause a stream saw: ${_p:-?} s" \
         "(replay wait $((WAIT_MS / 1000)) s); all done $(since "$2") s after the fault;" \
         "--status: $PROMOTIONS promotions, $REPLAYS replays"
}

# the last stage killed, nothing restarted
begin kill-last
t0=$(now)
p35_kill s1 KILL
check4 kill-last "$t0" s1b
# the killed one comes back: a spare now
stage s1 $SPLIT:8
spare_ok s1 1 30 || fail "restarted s1 is not the spare of stage 1: $(status)"
echo "restarted s1 is the spare of stage 1"

# SIGTERM of the promoted stage: Leaving, and the spare at once
begin term
t0=$(now)
p35_kill s1b TERM
check4 term "$t0" s1
tail -n +$((L0 + 1)) "$P35_RUN/coord.log" | grep -q "stage 1 .*lost: said it is leaving" ||
    fail "term: the stage did not say it was leaving"
stage s1b $SPLIT:8
spare_ok s1b 1 30 || fail "restarted s1b is not the spare of stage 1: $(status)"

# the first stage killed: s0b, not s0x (other weights)
begin kill-first
t0=$(now)
p35_kill s0 KILL
check4 kill-first "$t0" s0b
tail -n +$((L0 + 1)) "$P35_RUN/coord.log" | grep -q "spare $(ep s0x) promoted" &&
    fail "kill-first: the spare with other weights was promoted"

# hung (SIGSTOP): the step deadline, then the spare
stage s0 0:$SPLIT
spare_ok s0 0 30 || fail "restarted s0 is not the spare of stage 0: $(status)"
begin stop
t0=$(now)
kill -STOP "$P35_PID_s0b"
check4 stop "$t0" s0
kill -CONT "$P35_PID_s0b"
spare_ok s0b 0 30 || fail "s0b, continued, is not the spare of stage 0: $(status)"
echo "s0b, continued, is the spare of stage 0"

ok "spares take over, streams unchanged"
