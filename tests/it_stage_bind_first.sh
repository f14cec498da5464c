#!/bin/sh
# A stage binds its endpoint before it reads any weight: on a taken tcp
# port (insecure = yes) or ipc path a second qwen35-stage fails at once,
# naming the endpoint, without its "loading layers" line (a big range
# would otherwise load for minutes first and only then fail).
set -eu
. "$(dirname "$0")/lib.sh"
setup
PORT=$(free_ports 1) || fail "no free TCP port"
TCP=tcp://127.0.0.1:$PORT
IPC=ipc://$T/held.sock
P35_STAGE_EP_a=$TCP p35_stage a "$M" 0:4 --threads 1 --max-seqs 1 --max-ctx 256
P35_STAGE_EP_b=$IPC p35_stage b "$M" 0:4 --threads 1 --max-seqs 1 --max-ctx 256
wait_for "$T/a.log" "serving layers" 30 || fail "the first tcp stage did not come up"
wait_for "$T/b.log" "serving layers" 30 || fail "the first ipc stage did not come up"
for ep in "$TCP" "$IPC"; do
    t0=$(now)
    # shellcheck disable=SC2046
    "$BIN/qwen35-stage" --model "$M" --layers 4:8 --threads 1 --bind "$ep" \
        $(case $ep in tcp://*) echo --insecure ;; esac) >"$T/second.log" 2>&1 && rc=0 || rc=$?
    took=$(since "$t0")
    [ $rc -ne 0 ] || fail "$ep: a second stage started on a taken endpoint"
    grep -q "ERROR: bind $ep" "$T/second.log" || fail "$ep: no error naming the endpoint: $(cat "$T/second.log")"
    ! grep -q "loading layers" "$T/second.log" || fail "$ep: loaded before binding: $(cat "$T/second.log")"
    awk -v t="$took" -v lim="$(p35_scale 1)" 'BEGIN { exit !(t < lim) }' || fail "$ep: took $took s to fail"
    ok "$ep taken: exit $rc in $took s: $(grep ERROR "$T/second.log" | head -n 1)"
done
