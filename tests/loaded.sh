#!/bin/sh
# The integration scripts on a busy machine: a background CPU burner
# (stress-ng --cpu N, Debian's stress-ng; plain shell loops where it is
# missing) keeps the load average at or above QWEN35_LOAD_MIN while
# tests/run.sh runs the scripts with every time limit scaled by
# QWEN35_TIME_SCALE (client/pipeline.sh: p35_scale).
#
#   sh tests/loaded.sh BUILD [it_NAME ...]     (no names: every script)
#
# QWEN35_BURNERS (default 6: load >= 6 on 2 cores), QWEN35_TIME_SCALE
# (default 4), QWEN35_LOAD_MIN (default 6: the burner's warm-up waits for
# it, at most 90 s). Prints the load average seen (min / max of 1-minute
# figures, sampled every 5 s) after the summary.
set -u
BUILD=${1:-build}
[ $# -gt 0 ] && shift
N=${QWEN35_BURNERS:-6}
LOAD_MIN=${QWEN35_LOAD_MIN:-6}
export QWEN35_TIME_SCALE=${QWEN35_TIME_SCALE:-4}
DIR=$(mktemp -d /tmp/q35-loaded-XXXXXX) || exit 1
BURN=""
stop() {
    for p in $BURN; do kill "$p" 2>/dev/null; done
    for p in $BURN; do wait "$p" 2>/dev/null; done
    rm -rf "$DIR"
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
load1() { cut -d' ' -f1 /proc/loadavg; }
if command -v stress-ng >/dev/null 2>&1; then
    stress-ng --cpu "$N" --quiet >/dev/null 2>&1 &
    BURN=$!
    what="stress-ng --cpu $N"
else
    i=0
    while [ $i -lt "$N" ]; do
        sh -c 'while :; do :; done' &
        BURN="$BURN $!"
        i=$((i + 1))
    done
    what="$N shell loops"
fi
# the 1-minute load average rises over about a minute
t=0
while awk -v l="$(load1)" -v m="$LOAD_MIN" 'BEGIN { exit !(l < m) }' && [ $t -lt 90 ]; do
    sleep 5
    t=$((t + 5))
done
echo "loaded: $what, load $(load1) after ${t} s of warm-up, QWEN35_TIME_SCALE=$QWEN35_TIME_SCALE"
( while :; do load1 >>"$DIR/load"; sleep 5; done ) &
SAMPLER=$!
BURN="$BURN $SAMPLER"
rc=0
sh tests/run.sh "$BUILD" it "$@" || rc=$?
awk 'NR == 1 || $1 < mn { mn = $1 } $1 > mx { mx = $1 } END {
    printf "loaded: load average during the run: min %.1f, max %.1f (%d samples)\n", mn, mx, NR }' "$DIR/load"
exit $rc
