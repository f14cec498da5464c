#!/bin/sh
# --step-rows on the stages: the most rows one forward step holds (decode
# rows and prompt chunks together), the chain's the least of its stages'.
# Real CPU stages on the tiny model, a 600-token prompt, the coordinator's
# --trace showing every step's prompt rows:
# - by default (256) no step holds more than 256;
# - stages at 96 and 64: the chain's steps hold 64 at most;
# - both at 1024 and the coordinator's --prefill-chunk 512: a step holds
#   more than 256 (the prompt in fewer, larger chunks);
# - --prefill-chunk above the stages' step-rows: a warning, steps capped;
# - the same tokens every time (chunking never changes the output);
# - a value out of range is refused, naming the option.
set -eu
. "$(dirname "$0")/lib.sh"
setup
awk 'BEGIN { srand(11); for (i = 0; i < 600; i++) printf "%d ", 1 + int(rand() * 400); print "" }' >"$P35_RUN/long.ids"

# run NAME ROWS0 ROWS1 [coordinator options]: the prompt through stages at
# --step-rows ROWS0 and ROWS1 (empty: the default); its tokens in NAME.out,
# the trace in NAME.trace, the coordinator's log in NAME.log
run() {
    name=$1
    a0=${2:+--step-rows $2}
    a1=${3:+--step-rows $3}
    shift 3
    # shellcheck disable=SC2086
    p35_stage s0 "$M" 0:4 --max-seqs 2 --max-ctx 1024 $a0
    # shellcheck disable=SC2086
    p35_stage s1 "$M" 4:8 --max-seqs 2 --max-ctx 1024 $a1
    p35_coord "$M" s0 s1 -- --max-seqs 2 --max-ctx 1024 --trace "$P35_RUN/$name.trace" "$@"
    p35_wait_ready 30
    p35_client --prompt-ids "$P35_RUN/long.ids" -n 8 --ignore-eos --ids --timeout 120000 \
        >"$P35_RUN/$name.out" || fail "$name: the prompt failed: exit $?"
    p35_stop   # completes the trace
    cp "$P35_RUN/coord.log" "$P35_RUN/$name.log"
    p35_clear_logs
}

# steps NAME: "steps largest" over the prompt's steps on stage 1 (rows > 0)
steps() {
    grep '"ph":"X","pid":1,"tid":2,' "$P35_RUN/$1.trace" | grep -v '"prefill_rows":0}' | awk '
        { r = $0; sub(/.*"prefill_rows":/, "", r); n++; if (r + 0 > mx) mx = r + 0 }
        END { printf "%d %d\n", n, mx }'
}

run plain "" ""
run small 96 64
run big 1024 1024 --prefill-chunk 512
run over 64 64 --prefill-chunk 512

set -- $(steps plain)
echo "default: the 600-token prompt in $1 steps, the largest $2 rows"
[ "$2" -gt 0 ] && [ "$2" -le 256 ] || fail "default: a step of $2 prompt rows (256 at most)"
set -- $(steps small)
echo "--step-rows 96 and 64: $1 steps, the largest $2 rows"
[ "$2" -gt 0 ] && [ "$2" -le 64 ] || fail "--step-rows 96/64: a step of $2 prompt rows (the chain's least: 64)"
[ "$1" -ge 10 ] || fail "--step-rows 96/64: 600 rows in $1 steps (10 at least)"
set -- $(steps big)
echo "--step-rows 1024, --prefill-chunk 512: $1 steps, the largest $2 rows"
[ "$2" -gt 256 ] && [ "$2" -le 512 ] ||
    fail "--step-rows 1024, --prefill-chunk 512: the largest step held $2 prompt rows (257..512 expected)"
set -- $(steps over)
echo "--step-rows 64, --prefill-chunk 512: $1 steps, the largest $2 rows"
[ "$2" -gt 0 ] && [ "$2" -le 64 ] || fail "--prefill-chunk 512 over step-rows 64: a step of $2 prompt rows"
grep -q "prefill-chunk 512: the stages' steps hold 64 rows at most" "$P35_RUN/over.log" ||
    fail "--prefill-chunk 512 over step-rows 64: no warning: $(tail -n 5 "$P35_RUN/over.log")"
for n in small big over; do
    [ -s "$P35_RUN/$n.out" ] || fail "$n: no tokens"
    cmp -s "$P35_RUN/plain.out" "$P35_RUN/$n.out" ||
        fail "$n: tokens differ from the default's: $(cat "$P35_RUN/$n.out") vs $(cat "$P35_RUN/plain.out")"
done

# out of range: one line naming the option and the bound
if "$BIN/qwen35-stage" --model "$M" --layers 0:4 --bind "ipc://$P35_RUN/x.sock" --step-rows 0 \
    >"$P35_RUN/bad.out" 2>&1; then
    fail "--step-rows 0 accepted"
fi
grep -q "step-rows" "$P35_RUN/bad.out" || fail "--step-rows 0: the error does not name the option: $(cat "$P35_RUN/bad.out")"
ok "--step-rows bounds each step's rows (the chain's least), larger steps take a long prompt in fewer chunks, the same tokens"
