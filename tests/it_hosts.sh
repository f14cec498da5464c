#!/bin/sh
# Stages on simulated hosts (tests/hosts.sh: network namespaces, veth
# links through a switch namespace, tbf rate limits, 5 ms RTT by tc netem
# or, without sch_netem, by qwen35-netrelay), TCP with CURVE, real CPU
# stages of the tiny Q8_0 model: s0 on host 1, s1 on host 2, a spare of
# s1 on host 3, the coordinator on host 0.
# - four streams (greedy and seeded) over the 5 ms links equal the same
#   requests on loopback (no namespaces) — and the golden greedy ids, 16
#   tokens of which take at least 16 x 2 hops x 5 ms
# - fault 1: host 1's link down for 4 s mid-decode, then up: every stream
#   completes identical to its undisturbed run (the pause printed)
# - fault 2: host 2 torn down mid-decode (its processes killed, its
#   namespace deleted): the spare on host 3 takes over, every stream
#   identical, the pause printed
# Needs root, ip and tc (skips without them).
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-netrelay qwen35-keygen
. "$(dirname "$0")/hosts.sh"
hosts_need
N=${N:-160}
. "$(dirname "$0")/streams4.sh"
SOPTS="--threads 1 --max-seqs 8 --max-ctx 1024"
COPTS="--max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms 30000"

# the references on loopback: the same daemons, TCP with CURVE, no namespaces
hosts_stage l0 lo "$M" 0:4 $SOPTS
hosts_stage l1 lo "$M" 4:8 $SOPTS
# shellcheck disable=SC2086
hosts_coord "$M" l0 l1 -- $COPTS
p35_wait_ready 30
refs4
p35_stop
p35_clear_logs

HOSTS_RTT_MS=5 HOSTS_RATE=1gbit
hosts_init 3
hosts_stage s0 1 "$M" 0:4 $SOPTS
hosts_stage s1 2 "$M" 4:8 $SOPTS
hosts_stage s1b 3 "$M" 4:8 $SOPTS
# shellcheck disable=SC2086
hosts_coord "$M" s0 s1 --spare-of s1b -- $COPTS
p35_wait_ready 30
t1=$(now)
got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids --timeout 20000) ||
    fail "a request over the simulated hosts failed"
took=$(since "$t1")
[ "$got" = "$GOLD" ] || fail "over 5 ms links greedy [$got] != golden [$GOLD]"
# the links are real: 16 tokens each cross both hops, 5 ms a round trip
awk -v t="$took" 'BEGIN { exit !(t >= 0.16) }' ||
    fail "16 tokens over two 5 ms hops took $took s (< 0.16 s): the delay is not on the links"
t0=$(now)
start4 calm
wait4 calm 60
ok "5 ms RTT ($(hosts_mech_says)), CURVE: golden greedy exact (16 tokens in $took s), 4 streams equal loopback's in $(since "$t0") s"

L0=$(wc -l <"$P35_RUN/coord.log")
start4 cable
mid_decode cable
hosts_link_down 1
sleep 4
hosts_link_up 1
wait4 cable 60
ok "host 1's link down 4 s mid-decode: 4 streams identical; longest pause $(longest_pause "$L0") s"

L0=$(wc -l <"$P35_RUN/coord.log")
start4 gone
mid_decode gone
hosts_gone 2
wait4 gone 60
grep -q "spare tcp://[0-9.:]* promoted in place of" "$P35_RUN/coord.log" || fail "the spare on host 3 was not promoted"
ok "host 2 torn down mid-decode: the spare on host 3 took over, 4 streams identical; longest pause $(longest_pause "$L0") s"
