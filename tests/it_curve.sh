#!/bin/sh
# CURVE between coordinator and stages, with the real daemons (2 stages,
# tiny Q8_0, ipc://):
# - stages with curve-secret-key + curve-clients, a coordinator with its
#   key and each stage's stage-key: a request is served, greedy exact;
# - a spare with its own key (spare-key): promoted when stage 1 is killed,
#   greedy exact; without its spare-key the coordinator exits 78;
# - a coordinator whose key is not listed: the stage logs the refused key
#   and the coordinator's --status names the refusal; once the stages
#   (restarted) list it, the same coordinator gets in;
# - a coordinator with a wrong stage-key, and one without CURVE: no link
#   comes up and --status says why.
set -eu
. "$(dirname "$0")/lib.sh"
setup
K=$P35_RUN/keys
mkdir "$K"
for n in s0 s1 s1b coord intruder; do "$BIN/qwen35-keygen" "$K/$n" > /dev/null; done
{ echo "# coordinators allowed in"; cat "$K/coord.pub"; } > "$K/clients"

# stage NAME A:B [CLIENTS-FILE]
stage() { p35_stage "$1" "$M" "$2" --threads 1 --max-seqs 4 --max-ctx 256 \
              --curve-secret-key "$K/$1.key" --curve-clients "${3:-$K/clients}"; }
stage s0 0:4
stage s1 4:8

# status_problem SECONDS TEXT: until --status shows TEXT (a stage's problem)
status_problem() {
    _end=$(( $(date +%s) + $1 ))
    while :; do
        st=$(p35_client --status --json --connect-timeout 300 --timeout 2000 2>/dev/null) || st=""
        case $st in *"$2"*) return 0 ;; esac
        [ "$(date +%s)" -ge "$_end" ] && { echo "$st"; return 1; }
        sleep 0.2
    done
}

p35_coord "$M" s0 s1 -- --curve-secret-key "$K/coord.key" --stage-key "$K/s0.pub" --stage-key "$K/s1.pub"
p35_wait_ready 30
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 20000) ||
    fail "request over CURVE failed"
[ "$got" = "$GOLD" ] || fail "over CURVE greedy [$got] != golden [$GOLD]"
grep -qF "CURVE: public key $(cat "$K/s0.pub")" "$P35_RUN/s0.log" || fail "s0 does not log its public key"
echo "allowed coordinator: served, greedy exact"
p35_kill coord TERM

# a spare over CURVE (its own key: spare-key), promoted when s1 is killed
stage s1b 4:8
p35_coord "$M" s0 s1 -- --curve-secret-key "$K/coord.key" --stage-key "$K/s0.pub" --stage-key "$K/s1.pub" \
    --spare "ipc://$P35_RUN/s1b.sock 4:8" --spare-key "$K/s1b.pub"
p35_wait_ready 30
p35_kill s1 KILL
_end=$(( $(date +%s) + 20 ))   # until s1b serves as stage 1
until p35_client --status --json --connect-timeout 300 --timeout 2000 2>/dev/null | sed 's/"spares":.*//' |
        grep -q "\"endpoint\":\"ipc://$P35_RUN/s1b.sock\",\"layers\":\[4,8\],\"up\":true"; do
    [ "$(date +%s)" -ge "$_end" ] && { fail "the CURVE spare did not take stage 1's place"; break; }
    sleep 0.2
done
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 20000) ||
    fail "request on the promoted CURVE spare failed"
[ "$got" = "$GOLD" ] || fail "on the promoted CURVE spare greedy [$got] != golden [$GOLD]"
grep -q "spare ipc://$P35_RUN/s1b.sock promoted in place of" "$P35_RUN/coord.log" ||
    fail "the CURVE spare was not promoted"
echo "spare over CURVE (spare-key): promoted when stage 1 was killed, greedy exact"
p35_kill coord TERM
stage s1 4:8
# spares need their keys too
rc=0
"$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/x.sock" --stage "ipc://$P35_RUN/s0.sock 0:4" \
    --stage "ipc://$P35_RUN/s1.sock 4:8" --spare "ipc://$P35_RUN/s1b.sock" --curve-secret-key "$K/coord.key" \
    --stage-key "$K/s0.pub" --stage-key "$K/s1.pub" 2>"$P35_RUN/nokey.err" || rc=$?
[ $rc = 78 ] && grep -q "every spare needs its spare-key: 0 spare-key for 1 spares" "$P35_RUN/nokey.err" ||
    fail "a spare without spare-key: exit $rc, $(cat "$P35_RUN/nokey.err")"

# a coordinator key the stages do not list
p35_coord "$M" s0 s1 -- --curve-secret-key "$K/intruder.key" --stage-key "$K/s0.pub" --stage-key "$K/s1.pub"
status_problem 10 "CURVE handshake refused by the stage" ||
    fail "unlisted coordinator key: --status does not name the refusal"
grep -qF "refused client key $(cat "$K/intruder.pub")" "$P35_RUN/s0.log" ||
    fail "s0 did not log the refused key"
n=$(grep -c "refused client key" "$P35_RUN/s0.log" || true)
[ "$n" -eq 1 ] || fail "s0 logged the refused key $n times (want once)"
echo "unlisted key: refused; $(grep -o 'stage 0 ([^)]*): CURVE[^"]*' "$P35_RUN/coord.log" | head -n 1)"
# the stages restart listing that key: the same coordinator gets in
{ cat "$K/clients"; cat "$K/intruder.pub"; } > "$K/clients2"
p35_kill s0 TERM
p35_kill s1 TERM
stage s0 0:4 "$K/clients2"
stage s1 4:8 "$K/clients2"
p35_wait_ready 20
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 4 --ignore-eos --ids --timeout 20000) ||
    fail "request after the stages listed the key failed"
echo "key listed after a restart of the stages: the coordinator reconnected by itself"
p35_kill coord TERM
p35_kill s0 TERM
p35_kill s1 TERM
stage s0 0:4
stage s1 4:8

# the stages' keys swapped: the coordinator cannot speak to either
p35_coord "$M" s0 s1 -- --curve-secret-key "$K/coord.key" --stage-key "$K/s1.pub" --stage-key "$K/s0.pub"
status_problem 10 "closed the connection during the CURVE handshake" ||
    fail "wrong stage-key: --status does not say so"
wait_for "$P35_RUN/s1.log" "stage-key is not this stage's public key" 5 ||
    fail "wrong stage-key: s1 does not log the failed handshake"
echo "wrong stage-key: not connected, --status says why"
p35_kill coord TERM

# no CURVE at all
p35_coord "$M" s0 s1
status_problem 10 "the stage requires CURVE: set curve-secret-key" ||
    fail "plaintext coordinator: --status does not say why"
# (the stage logs the mechanism mismatch only when it reads the greeting
# before the coordinator hangs up: a race, so not checked here)
n=$(grep -c "does not use CURVE" "$P35_RUN/s0.log" || true)
[ "$n" -le 1 ] || fail "s0 logged the plaintext peer $n times (want at most once)"
echo "plaintext coordinator: refused, --status says why"
ok "CURVE: allowed key served, a spare promoted; unlisted key, wrong stage-key and plaintext refused"
