#!/bin/sh
# Many clients at once (2 stages, tiny Q8_0):
# - 8 concurrent clients with different prompts (ids and chat text) and
#   seeds get exactly what the same 8 requests get one after another;
# - a cancelled request (SIGINT to its client) ends "cancelled" and frees
#   its slots on the coordinator and every stage (checked via --status);
# - a client killed mid-stream has its slots freed too;
# - a request past its deadline ends with finish "deadline";
# - past the slots and the queue, a request gets RESOURCE_EXHAUSTED.
set -eu
. "$(dirname "$0")/lib.sh"
setup

start() {   # start MAX_SEQS [coordinator options…]
    s=$1
    shift
    p35_stage s0 "$M" 0:4 --threads 1 --max-seqs "$s" --max-ctx 4096
    p35_stage s1 "$M" 4:8 --threads 1 --max-seqs "$s" --max-ctx 4096
    p35_coord "$M" s0 s1 -- --max-seqs "$s" --max-ctx 4096 "$@"
    p35_wait_ready 30
}

# Slots in use on the coordinator and on each stage, and active requests:
# "0 0 0 0" once everything is freed.
usage_now() {
    st=$(p35_client --status --json)
    printf '%s' "$st" | grep -o '"slots_used":[0-9]*' | cut -d: -f2 | tr '\n' ' '
    printf '%s\n' "$(p35_field "$st" active)"
}

wait_freed() {   # wait_freed WHAT SECONDS
    t_end=$(( $(date +%s) + $2 ))
    while :; do
        u=$(usage_now)
        case "$u" in *[1-9]*) ;; *) echo "$1: slots freed ($u)"; return 0 ;; esac
        [ "$(date +%s)" -ge "$t_end" ] && { fail "$1: slots still in use after $2 s: $u"; return 1; }
        sleep 0.2
    done
}

start 8
T=$P35_RUN/t

# --- the CLI's modes through the pipeline
printf 'Hello\nHow are you?\n' | p35_client --chat -n 6 --ignore-eos --ids >"$T.chat" ||
    fail "--chat: exit $?"
[ "$(wc -l <"$T.chat")" -eq 2 ] && [ "$(awk '{ n += NF } END { print n }' "$T.chat")" -eq 12 ] ||
    fail "--chat: 2 turns of 6 ids expected, got: $(cat "$T.chat")"
p35_client --json --logprobs 3 -n 6 --ignore-eos --system "Be brief." "Hi" >"$T.json" || fail "--json: exit $?"
[ "$(grep -c '"event":"piece"' "$T.json")" -ge 1 ] && grep -q '"completion_tokens":6' "$T.json" ||
    fail "--json: pieces and a final with 6 tokens expected: $(cat "$T.json")"
grep '"event":"piece"' "$T.json" | grep -v '"ids":\[\]' | grep -vq '"logprobs":\[-\?[0-9]' &&
    fail "--json --logprobs: a piece with ids but no logprobs: $(grep piece "$T.json" | head -n 2)"
alt='{"id":[0-9]*,"logprob":-\{0,1\}[0-9][^}]*}'
grep '"event":"piece"' "$T.json" | grep -v '"ids":\[\]' | grep -vq "\"top_logprobs\":\[\[$alt,$alt,$alt\]" &&
    fail "--json --logprobs 3: a piece without 3 alternatives: $(grep piece "$T.json" | head -n 2)"
p35_client --status >"$T.status" || fail "--status: exit $?"
grep -q '^0 .* 0:4 .*yes' "$T.status" && grep -q '^1 .* 4:8 .*yes' "$T.status" ||
    fail "--status: stages 0:4 and 4:8 up expected: $(cat "$T.status")"
# a stop string taken from an answer ends the same request before it
p35_client --json --no-think -n 24 "Count to ten." >"$T.full"
stop=$(grep '"event":"piece"' "$T.full" | sed -n 's/.*"text":"\([A-Za-z][A-Za-z]*\)".*/\1/p' | sed -n 3p)
if [ -n "$stop" ]; then
    p35_client --json --no-think -n 24 --stop "$stop" "Count to ten." >"$T.stop"
    grep -q '"finish":"stop"' "$T.stop" || fail "--stop '$stop': no finish stop: $(tail -n 1 "$T.stop")"
    grep '"event":"piece"' "$T.stop" | grep -q "\"text\":\"$stop\"" &&
        fail "--stop '$stop': the stop string was emitted"
    echo "CLI: --chat, --json --logprobs, --system, --status, --stop '$stop' ok"
else
    fail "--stop: no alphabetic piece in the answer to take a stop string from: $(cat "$T.full")"
fi
# 8 requests: 5 raw id prompts (windows of tokens64), 3 chat prompts;
# each with its own seed; sampling on so that seeds matter.
req() {   # req I: the options of request I
    i=$1
    case $i in
    0|1|2|3|4)
        tr ' ' '\n' <"$G/tokens64.txt" | sed -n "$((i * 7 + 1)),$((i * 7 + 9 + i))p" >"$T.ids$i"
        echo "--prompt-ids $T.ids$i" ;;
    5) echo "--no-think" ;;
    *) echo "" ;;
    esac
}
prompt() {
    case $1 in
    5) echo "Hello there" ;;
    6) echo "Tell me a story about a cat." ;;
    7) echo "What is 2 + 2?" ;;
    *) echo "" ;;
    esac
}
run_req() {   # run_req I OUT [bg]
    i=$1
    opts="$(req "$i") -n 20 --ignore-eos --ids --temp 0.8 --top-k 40 --seed $((1000 + i * 17))"
    p=$(prompt "$i")
    if [ "${3:-}" = bg ]; then
        # shellcheck disable=SC2086
        if [ -n "$p" ]; then p35_bg_client "$2" $opts "$p"; else p35_bg_client "$2" $opts; fi
    else
        # shellcheck disable=SC2086
        if [ -n "$p" ]; then p35_client $opts "$p" >"$2"; else p35_client $opts >"$2"; fi
    fi
}
for i in 0 1 2 3 4 5 6 7; do
    run_req $i "$T.seq$i" || fail "sequential request $i failed: $(cat "$T.seq$i")"
done
t0=$(date +%s.%N)
pids=""
for i in 0 1 2 3 4 5 6 7; do
    run_req $i "$T.con$i" bg
    pids="$pids $P35_LAST"
done
i=0
for p in $pids; do
    wait "$p" || fail "concurrent request $i: exit $? ($(cat "$T.con$i.err"))"
    i=$((i + 1))
done
echo "8 concurrent requests in $(echo "$(date +%s.%N) $t0" | awk '{ printf "%.2f", $1 - $2 }') s"
for i in 0 1 2 3 4 5 6 7; do
    if ! cmp -s "$T.seq$i" "$T.con$i"; then
        fail "request $i: concurrent [$(cat "$T.con$i")] != sequential [$(cat "$T.seq$i")]"
    elif [ "$(wc -w <"$T.seq$i")" -ne 20 ]; then
        fail "request $i: $(wc -w <"$T.seq$i") ids, expected 20"
    fi
done
[ $P35_FAILS -eq 0 ] && echo "8 concurrent clients = 8 sequential runs"
distinct=$(cat "$T".seq? | sort -u | wc -l)
[ "$distinct" -ge 6 ] || fail "only $distinct distinct answers among 8 different requests"

# --- cancel: SIGINT to the client, which sends Cancel
p35_bg_client "$T.cancel" --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json
pid=$P35_LAST
wait_for "$T.cancel" '"event":"piece"' 20 || fail "cancel: no first token within 20 s"
[ "$(usage_now)" != "0 0 0 0" ] || fail "cancel: no slot in use while the request runs"
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
grep -q '"finish":"cancelled"' "$T.cancel" || fail "cancel: no final event with finish cancelled: $(tail -n 1 "$T.cancel")"
[ $rc -eq 0 ] || fail "cancel: client exit $rc"
wait_freed cancel 30 || true

# --- a client that vanishes mid-stream
p35_bg_client "$T.vanish" --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json
pid=$P35_LAST
wait_for "$T.vanish" '"event":"piece"' 20 || fail "vanish: no first token within 20 s"
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
wait_freed "vanished client" 30 || true

# --- deadline
t0=$(date +%s.%N)
rc=0
p35_client --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json --deadline 700 >"$T.dl" 2>"$T.dl.err" || rc=$?
dt=$(echo "$(date +%s.%N) $t0" | awk '{ printf "%.2f", $1 - $2 }')
grep -q '"finish":"deadline"' "$T.dl" || fail "deadline: no final with finish deadline: $(tail -n 1 "$T.dl")"
[ $rc -ne 0 ] || fail "deadline: exit code 0 for a request that missed its deadline"
awk -v d="$dt" 'BEGIN { exit !(d < 15) }' || fail "deadline: 700 ms deadline took $dt s"
echo "deadline 700 ms: ended after $dt s ($(grep -c '"event":"piece"' "$T.dl") pieces), exit $rc"
wait_freed deadline 30 || true

# --- queue: 2 slots, queue of 1: the 4th concurrent request is refused
p35_stop
p35_clear_logs
start 2 --max-queue 1
pids=""
for i in 1 2 3 4; do
    p35_bg_client "$T.q$i" --prompt-ids "$G/tokens64.txt" -n 0 --ignore-eos --json --timeout 30000
    pids="$pids $P35_LAST"
    sleep 0.05
done
wait_for "$T.q4" '"event"' 30 || true
grep -h '"code":"RESOURCE_EXHAUSTED"' "$T".q? >/dev/null ||
    fail "queue: no RESOURCE_EXHAUSTED with 2 slots, queue 1 and 4 requests: $(cat "$T".q? | grep -v piece | head -n 4)"
for p in $pids; do kill -INT "$p" 2>/dev/null || true; done
for p in $pids; do wait "$p" 2>/dev/null || true; done
wait_freed "queue" 30 || true
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids)
[ "$got" = "$(tr -s ' \n' ' ' <"$G/expect/tiny-Q8_0.greedy.txt" | sed 's/ $//;s/^ //')" ] ||
    fail "after the queue test: greedy [$got] differs from the golden continuation"

ok "concurrent clients served exactly"
