#!/bin/sh
# make bench-hosts-faults — the faults a network has, on simulated hosts
# (tests/hosts.sh; needs root): real CPU stages of the tiny Q8_0 model,
# s0 on host 1, s1 on host 2, a spare of s0 on host 4 and of s1 on host
# 3, the coordinator on host 0, RTT FAULTS_RTT_MS (5) ms, 1 Gbit/s.
# For each fault, four streams (greedy and seeded, tests/streams4.sh) of N
# (96) tokens each must complete identical to their undisturbed runs, and
# the table gives the longest pause a stream saw: the longest interval
# between two steps of the last stage while the streams decode (the
# coordinator's --trace), or a replayed stream's pause (its log), the
# greater. The faults:
#   loss 1%, loss 5%   the whole run (netem loss; the relay: each segment
#                      lost stalls its connection for a 200 ms RTO)
#   jitter 200 ms      +-200 ms a direction, the whole run
#   drop 10 s          host 1's link down 10 s mid-decode, then up
#   host gone          host 2 torn down mid-decode (processes killed,
#                      namespace deleted): the spare on host 3 serves
#   partition          the coordinator and host 2 cut off from each other
#                      10 s mid-decode (host 2 still reaches the rest)
# Stops (exit 1) at the first stream that differs or fails.
set -eu
. "$(dirname "$0")/../tests/lib.sh"
setup qwen35-netrelay qwen35-keygen
. tests/hosts.sh
hosts_need
N=${N:-96}
. tests/streams4.sh
RTT=${FAULTS_RTT_MS:-5}
SOPTS="--threads 1 --max-seqs 8 --max-ctx 1024"
COPTS="--max-seqs 8 --max-ctx 1024 --step-timeout-ms 3000 --replay-wait-ms 30000"
TABLE=$P35_RUN/table
: >"$TABLE"

# chain: the four hosts' daemons, the coordinator with a trace
chain() {
    hosts_init 4 >"$P35_RUN/hosts.txt"
    hosts_stage s0 1 "$M" 0:4 $SOPTS
    hosts_stage s1 2 "$M" 4:8 $SOPTS
    hosts_stage s1b 3 "$M" 4:8 $SOPTS
    hosts_stage s0b 4 "$M" 0:4 $SOPTS
    # shellcheck disable=SC2086
    hosts_coord "$M" s0 s1 --spare-of s0b s1b -- $COPTS --trace "$P35_RUN/trace.json"
    p35_wait_ready 60
}
unchain() {
    p35_stop
    hosts_down
    p35_clear_logs
    HOSTS_PORT=5800
}
# trace_gap: the longest interval (s) between the ends of two consecutive
# steps of the last stage (tid 2) after the first one
trace_gap() {
    awk '/"ph":"X"/ && /"tid":2,/ { ts = $0; sub(/.*"ts":/, "", ts); d = $0; sub(/.*"dur":/, "", d)
            e = (ts + d) / 1e6; if (n++ && e - p > g) g = e - p; p = e }
         END { printf "%.3f", g }' "$P35_RUN/trace.json"
}
# fault NAME WHAT ACTION...: a fresh chain (HOSTS_* as set), the streams,
# ACTION run once they decode (none: the whole run is the fault)
fault() {
    _name=$1 _what=$2
    shift 2
    chain
    t0=$(now)
    start4 "$_name"
    mid_decode "$_name"
    [ $# -gt 0 ] && "$@"
    wait4 "$_name" 120
    wall=$(since "$t0")
    rp=$(longest_pause 0)
    unchain   # completes the trace
    tg=$(trace_gap)
    worst=$(awk -v a="${rp:-0}" -v b="$tg" 'BEGIN { printf "%.3f", (a > b ? a : b) }')
    # wait4 ended the script (fail) had a stream differed or failed
    printf '  %-12s %-50s %-10s %8s s %8s s\n' "$_name" "$_what" identical "$worst" "$wall" | tee -a "$TABLE"
}

echo "bench-hosts-faults: references: the same chain, RTT $RTT ms, undisturbed"
HOSTS_RTT_MS=$RTT HOSTS_RATE=1gbit
chain
sed 's/^/  /' "$P35_RUN/hosts.txt"
refs4
unchain
printf '  %-12s %-50s %-10s %10s %10s\n' fault what streams "longest pause" "wall (the fault's own 10 s included)"
fault none "no fault (the pause: one step's interval)"
HOSTS_LOSS=0.01 fault loss1 "1% packet loss, the whole run"
HOSTS_LOSS=0.05 fault loss5 "5% packet loss, the whole run"
HOSTS_LOSS=0
HOSTS_JITTER_MS=200 fault jitter "+-200 ms jitter a direction, the whole run"
HOSTS_JITTER_MS=0
drop10() { hosts_link_down 1; sleep 10; hosts_link_up 1; }
fault drop10 "host 1's link down 10 s, then up" drop10
fault gone "host 2 torn down (spare on host 3)" hosts_gone 2
part10() { hosts_partition 2; sleep 10; hosts_heal 2; }
fault partition "coordinator <-> host 2 cut 10 s (spare on host 3)" part10
echo "bench-hosts-faults: $(hosts_mech_says) for delay, jitter and loss; tbf for the rate;" \
    "$(grep -c identical "$TABLE") of $(wc -l <"$TABLE") faults: every stream identical"
