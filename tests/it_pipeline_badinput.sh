#!/bin/sh
# Bad input on the wire (2 stages, tiny Q8_0): every crafted message of
# qwen35-wireprobe --list — malformed protobuf, wrong sizes, positions out
# of order, unknown slots, oversized and many-frame messages, bad ids,
# sampling values and UTF-8 — sent to the coordinator or to each stage is
# answered with an error (or, where no answer is possible, dropped), and
# every process keeps serving: all alive after each probe, and a request
# through the pipeline still gives the golden continuation.
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-wireprobe

p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 4 --max-ctx 256
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 256
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 256
p35_wait_ready 30

ALIVE="s0 s1 coord"
alive() {
    for n in $ALIVE; do
        eval "pid=\$P35_PID_$n"
        kill -0 "$pid" 2>/dev/null || { fail "$n died after $1"; return 1; }
    done
}

serving() {
    got=$(p35_client --prompt-ids "$G/tokens64.txt" -n 16 --ignore-eos --ids) || { fail "request failed after $1"; return; }
    [ "$got" = "$GOLD" ] || fail "after $1: greedy [$got] != golden"
}

probe() {   # probe CASE ENDPOINT
    if out=$("$BIN/qwen35-wireprobe" --endpoint "$2" --case "$1" --n-vocab 512 --timeout 5000); then
        ok "$out"
    else
        fail "$out"
    fi
    alive "$1" || true
}

for c in $("$BIN/qwen35-wireprobe" --list | awk '$2 == "coordinator" { print $1 }'); do
    probe "$c" "$P35_EP"
done
serving "the coordinator probes"
# a stage serves its owner only (the coordinator): the probes, each a
# coordinator of its own, need the stages free
p35_kill coord TERM
ALIVE="s0 s1"
for s in s0 s1; do
    for c in $("$BIN/qwen35-wireprobe" --list | awk '$2 == "stage" { print $1 }'); do
        probe "$c" "ipc://$P35_RUN/$s.sock"
    done
done
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 256
ALIVE="s0 s1 coord"
p35_wait_ready 30
serving "the stage probes"
st=$(p35_client --status --json)
printf '%s' "$st" | grep -q '"up":false' && fail "a stage is down after the probes: $st"

ok "every bad message answered, every process serving"
