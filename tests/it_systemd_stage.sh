#!/bin/sh
# A real qwen35-stage on the golden tiny model, run by qwen35-fake-systemd
# (NOTIFY_SOCKET + WATCHDOG_USEC, as systemd does for a Type=notify unit):
#   - STATUS shows load progress; READY=1 comes only after the load
#     (100% reported first) and once the socket is bound;
#   - WATCHDOG=1 arrives at least every half period; STATUS reports slots;
#   - a stage hung on purpose (QWEN35_TEST_HOOKS=1 + SIGUSR1) stops pinging
#     and the watchdog fires;
#   - SIGTERM gives STOPPING=1 and exit 0.
set -u
. "$(dirname "$0")/lib.sh"
setup
WD_USEC=1000000
ulimit -c 0   # the watchdog's SIGABRT must not leave a core file behind

start_stage() {   # start_stage NAME
    QWEN35_TEST_HOOKS=1 under_systemd "$1" $WD_USEC \
        "$BIN/qwen35-stage" --model "$MODEL" --layers 0:8 --bind "ipc://$T/$1.sock" \
        --threads 1 --max-seqs 4 --max-ctx 256
    FS=$LAST
    [ -S "$T/$1.sock" ] || fail "$1: READY=1 before the socket $T/$1.sock was bound"
}

# --- 1. readiness, progress, watchdog cadence --------------------------------
start_stage run1
awk '
    /STATUS=loading [0-9]+% of/ { n_load++; if ($0 ~ /loading 100%/) full = NR }
    /READY=1$/ && !ready { ready = NR }
    END {
        if (!n_load) { print "no STATUS=loading N% line"; exit 1 }
        if (!full || full > ready) { print "READY=1 before \"loading 100%\""; exit 1 }
    }' "$T/run1.log" || fail "load progress"
ok "STATUS shows load progress ($(grep -c 'STATUS=loading' "$T/run1.log") lines), READY=1 after 100% and after bind"
sleep 3
res=$(awk -v half=$((WD_USEC / 2)) '
    /READY=1$/ { ready = 1 }
    ready && / WATCHDOG=1$/ { if (prev != "") { g = ($1 - prev) * 1e6; if (g > max) max = g } prev = $1; n++ }
    END { printf "%d %.0f %s\n", n, max, (n >= 6 && max <= half) ? "ok" : "bad" }' "$T/run1.log")
set -- $res
[ "$3" = ok ] || fail "watchdog: $1 pings, longest gap $2 us (want >= 6 pings, gaps <= $((WD_USEC / 2)) us)"
ok "WATCHDOG=1: $1 pings in ~3 s, longest gap $2 us <= half of WatchdogSec ($((WD_USEC / 2)) us)"
grep -q 'STATUS=serving [0-9]*/4 slots' "$T/run1.log" || fail "no 'STATUS=serving N/4 slots'"
ok "STATUS reports slots in use"

# --- 2. hung serving loop: pings stop, the watchdog fires --------------------
kill -USR1 "$FS"
wait_for "$T/run1.log" WATCHDOG_TIMEOUT 10 || fail "hung stage: the watchdog did not fire"
wait "$FS"
track run1 ""
res=$(awk '
    / SIGNAL 10$/ { sig = $1 }
    / WATCHDOG=1$/ { last = $1 }
    / WATCHDOG_TIMEOUT$/ { to = $1 }
    END { printf "%.3f %.3f %.3f %s\n", sig, last, to, (sig && last - sig <= 0.35 && to > sig) ? "ok" : "bad" }' "$T/run1.log")
set -- $res
[ "$4" = ok ] || fail "hung stage: SIGUSR1 at $1 s, last WATCHDOG=1 at $2 s, timeout at $3 s"
grep -q 'EXIT signal 6' "$T/run1.log" || fail "hung stage not ended by the watchdog's SIGABRT"
ok "hung stage (SIGUSR1 at $1 s): last ping $2 s, watchdog fired at $3 s, SIGABRT ended it"

# --- 3. SIGTERM: STOPPING=1, exit 0 ------------------------------------------
start_stage run2
kill -TERM "$FS"
wait "$FS"
rc=$?
track run2 ""
[ $rc -eq 0 ] || fail "SIGTERM: exit status $rc, expected 0"
awk '/ SIGNAL 15$/ { sig = NR } / STOPPING=1$/ && sig && NR > sig { stop = 1 } / EXIT 0$/ { ex = 1 }
     END { exit !(stop && ex) }' "$T/run2.log" || fail "SIGTERM: no STOPPING=1 then EXIT 0"
ok "SIGTERM: STOPPING=1, exit 0"
