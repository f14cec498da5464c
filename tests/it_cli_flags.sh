#!/bin/sh
# llama.cpp's flags through qwen35-run and qwen35-client (2 stages, tiny
# Q8_0), each checked by its effect:
# - the sampling flags mean the same in both tools: for each set, the text
#   qwen35-run prints equals what qwen35-client prints through the pipeline,
#   and the flag changed the answer (or, where it must not, did not);
# - -c limits the context, -n the answer, -f reads the prompt, -sys adds a
#   system turn, -no-cnv drops the template, -t sets the threads, --ignore-eos
#   runs to -n, --hide-think/--show-think and the default <think> markers;
# - -cnv driven through a pty (script(1)) answers two turns in each tool;
#   in qwen35-run Ctrl-C ends an answer and the conversation goes on;
# - llama.cpp flags without a meaning here (-ngl 99, -fa, --mlock) are
#   refused with one line naming them; -t in the client names the stage.
set -eu
. "$(dirname "$0")/lib.sh"
setup
T=$P35_RUN/t
RUN="$BIN/qwen35-run -m $M -t 1"

# --- refusals (no pipeline needed)
for tool in run client; do
    for flag in "-ngl 99" "-fa" "--mlock"; do
        # shellcheck disable=SC2086
        if [ $tool = run ]; then $RUN $flag -p hi >"$T.out" 2>"$T.err" && rc=0 || rc=$?
        else p35_client $flag hi >"$T.out" 2>"$T.err" && rc=0 || rc=$?; fi
        name=${flag%% *}
        [ $rc -eq 2 ] && [ "$(wc -l <"$T.err")" -eq 1 ] && grep -q -- "^qwen35-$tool: $name: llama.cpp's" "$T.err" ||
            fail "$tool $flag: exit $rc, want 2 and one line naming $name: $(cat "$T.err")"
    done
done
p35_client -t 4 hi >"$T.out" 2>"$T.err" && rc=0 || rc=$?
[ $rc -eq 2 ] && grep -q -- "-t: .*qwen35-stage --threads" "$T.err" || fail "client -t: $(cat "$T.err")"
$RUN -p hi --tmep 1 >"$T.out" 2>"$T.err" && rc=0 || rc=$?
grep -q -- "--tmep: unknown option (did you mean --temp?)" "$T.err" || fail "--tmep: $(cat "$T.err")"

p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 4 --max-ctx 4096
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 4096
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 4096
p35_wait_ready 30

# --- sampling: the same text from both tools, and each flag has its effect
both() {   # both NAME FLAGS…: qwen35-run's and qwen35-client's stdout, equal
    n=$1
    shift
    # shellcheck disable=SC2086
    $RUN -p "Hello there" -n 24 "$@" >"$T.$n.run" 2>"$T.$n.rerr" || fail "run $*: $(cat "$T.$n.rerr")"
    p35_client -n 24 "$@" "Hello there" >"$T.$n.cli" 2>"$T.$n.cerr" || fail "client $*: $(cat "$T.$n.cerr")"
    cmp -s "$T.$n.run" "$T.$n.cli" ||
        fail "$*: qwen35-run [$(cat "$T.$n.run")] != qwen35-client [$(cat "$T.$n.cli")]"
}
differ() {   # differ A B WHY
    cmp -s "$T.$1.run" "$T.$2.run" && fail "$3: no effect ([$(cat "$T.$1.run")])"
    return 0
}
same() {
    cmp -s "$T.$1.run" "$T.$2.run" || fail "$3: [$(cat "$T.$1.run")] != [$(cat "$T.$2.run")]"
}
both greedy
both t1 --temp 1 -s 5
both t1b --temperature 1 --seed 5
both t1s6 --temp 1 -s 6
both topk1 --temp 1 -s 5 --top-k 1
both topp --temp 1 -s 5 --top-p 0.000001
both minp --temp 1 -s 5 --min-p 1
both rep --repeat-penalty 1.8
both rep1 --repeat-penalty 1.8 --repeat-last-n 1
both pres --presence-penalty 20
both freq --frequency-penalty 20
same t1 t1b "--temperature/--seed spelled long"
differ greedy t1 "--temp 1"
differ t1 t1s6 "-s 6"
same topk1 greedy "--top-k 1 at temperature 1 (the argmax)"
same topp greedy "--top-p 1e-6 at temperature 1 (the argmax)"
same minp greedy "--min-p 1 at temperature 1 (the argmax)"
differ greedy rep "--repeat-penalty 1.8"
differ rep rep1 "--repeat-last-n 1"
differ greedy pres "--presence-penalty 20"
differ greedy freq "--frequency-penalty 20"

# --- reasoning display: markers when not a terminal, hidden, plain
grep -q '^<think>$' "$T.greedy.run" || fail "default: no <think> line in [$(cat "$T.greedy.run")]"
both hide --hide-think
both show --show-think
grep -q 'think>' "$T.hide.run" "$T.show.run" && fail "--hide-think/--show-think: markers left"
[ -s "$T.show.run" ] && [ "$(wc -c <"$T.show.run")" -gt "$(wc -c <"$T.hide.run")" ] ||
    fail "--show-think shows no more than --hide-think"

# --- -n, --ignore-eos, -c, -f, -sys, -no-cnv, -t
stat() {   # stat FILE KEY: a number after KEY in qwen35-run's stats line
    sed -n "s/.*$2 \([0-9]*\).*/\1/p" "$1" | tail -n 1
}
$RUN -p "Hello there" -n 7 --ignore-eos >/dev/null 2>"$T.err"
[ "$(stat "$T.err" generated)" = 7 ] || fail "run -n 7 --ignore-eos: $(cat "$T.err")"
p35_client -n 7 --ignore-eos --json "Hello there" >"$T.json"
grep -q '"completion_tokens":7' "$T.json" || fail "client -n 7: $(tail -n 1 "$T.json")"

$RUN -p "Hello there" -c 24 -n 100 --ignore-eos >/dev/null 2>"$T.err"
grep -q 'context full.*context 24/24' "$T.err" || fail "run -c 24: $(cat "$T.err")"
$RUN -p "Hello there" -c 8 >/dev/null 2>"$T.err" && fail "run -c 8: a 19-token prompt accepted"
grep -q 'the context holds 8 (-c 8)' "$T.err" || fail "run -c 8: $(cat "$T.err")"
p35_client -c 24 -n 100 --ignore-eos --json "Hello there" >"$T.json"
pt=$(p35_field "$(tail -n 1 "$T.json")" prompt_tokens)
ct=$(p35_field "$(tail -n 1 "$T.json")" completion_tokens)
[ $((pt + ct)) -eq 24 ] || fail "client -c 24: prompt $pt + generated $ct"
p35_client -c 8 "Hello there" >/dev/null 2>"$T.err" && fail "client -c 8: accepted"
grep -q 'context holds 8' "$T.err" || fail "client -c 8: $(cat "$T.err")"

printf 'Hello there' >"$T.prompt"
$RUN -f "$T.prompt" -n 24 >"$T.f.run" 2>/dev/null
same f greedy "run -f FILE"
p35_client -n 24 -f "$T.prompt" >"$T.f.cli"
cmp -s "$T.f.cli" "$T.greedy.cli" || fail "client -f FILE: [$(cat "$T.f.cli")]"

both sys -sys "Be brief."
differ greedy sys "-sys"
$RUN -p "Hello there" -n 1 -sys "Be brief." 2>"$T.err" >/dev/null
$RUN -p "Hello there" -n 1 2>"$T.err2" >/dev/null
[ "$(stat "$T.err" prompt)" -gt "$(stat "$T.err2" prompt)" ] || fail "-sys: prompt not longer"
$RUN -p "Hello there" -n 1 -no-cnv 2>"$T.err3" >/dev/null
[ "$(stat "$T.err3" prompt)" -lt "$(stat "$T.err2" prompt)" ] || fail "-no-cnv: template still applied"
both raw -no-cnv
p35_client -n 1 --json -no-cnv "Hello there" >"$T.json"
[ "$(p35_field "$(tail -n 1 "$T.json")" prompt_tokens)" = "$(stat "$T.err3" prompt)" ] ||
    fail "client -no-cnv: prompt tokens differ from qwen35-run's"

$RUN -p hi -n 1 -t 2 2>"$T.err" >/dev/null
grep -q ', 2 threads' "$T.err" || fail "run -t 2: $(cat "$T.err")"
"$BIN/qwen35-run" -m "$M" -p hi -n 1 2>"$T.err" >/dev/null
grep -q ", $(nproc) threads" "$T.err" || fail "run: default threads are not all $(nproc) cores: $(cat "$T.err")"
"$BIN/qwen35-run" --help | grep -q -- "tokens to generate: default 256" || fail "run --help: no -n default"

# --- -cnv on a terminal: two turns, each answered (and nothing computed twice)
if command -v script >/dev/null; then
    printf 'Hello\nHow are you?\n' >"$T.turns"
    # bounded: once a -cnv run never saw the end of its input (16 min)
    timeout -k 5 60 script -qec "$RUN -cnv -n 6 --ignore-eos" /dev/null <"$T.turns" >"$T.pty" 2>&1 || true
    n=$(grep -c 'length: prompt' "$T.pty" || true)
    [ "$n" -eq 2 ] || fail "run -cnv (pty): $n answers, want 2: $(cat -v "$T.pty")"
    grep -q 'prompt 23 tokens.*context 51/' "$T.pty" || fail "run -cnv: turn 2 recomputed: $(cat -v "$T.pty")"
    # shellcheck disable=SC2016
    timeout -k 5 60 script -qec "$BIN/qwen35-client --endpoint $P35_EP -cnv -n 6 --ignore-eos --stats" /dev/null <"$T.turns" >"$T.pty" 2>&1 || true
    n=$(grep -c '\[length:' "$T.pty" || true)
    [ "$n" -eq 2 ] || fail "client -cnv (pty): $n answers, want 2: $(cat -v "$T.pty")"
    grep -q "$(printf '\033')\[2m" "$T.pty" || fail "client -cnv (pty): reasoning not dimmed"
    # Ctrl-C while an answer streams ends that answer, the conversation goes on
    # (its context kept); end of input at the prompt ends the run
    rm -f "$T.fifo"
    mkfifo "$T.fifo"
    : >"$T.pty"
    timeout -k 5 120 script -qec "$RUN -cnv -n 4000 --ignore-eos --hide-think" /dev/null <"$T.fifo" >"$T.pty" 2>&1 &
    spid=$!
    trap '' PIPE   # a run that ended early: a FAIL below, not a dead script
    exec 7>"$T.fifo"
    waitfor() {   # waitfor PATTERN: until the pty shows it (30 s at most)
        i=0
        while ! grep -aq -- "$1" "$T.pty" && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    }
    # streaming: the pty has grown 64 bytes past SIZE (30 s at most), so a
    # Ctrl-C lands in the answer, not at the prompt (where it quits)
    streaming() {
        i=0
        while [ "$(wc -c <"$T.pty")" -lt $(($1 + 64)) ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    }
    waitfor '> '
    sz=$(wc -c <"$T.pty")
    printf 'Hello\n' >&7
    streaming "$sz"
    printf '\003' >&7
    waitfor 'interrupted'
    sz=$(wc -c <"$T.pty")
    printf 'Again\n' >&7
    streaming "$sz"
    printf '\003' >&7
    sleep 1
    printf '\004' >&7
    exec 7>&-
    trap - PIPE
    wait $spid || true
    # not anchored: the tty echoes Ctrl-C as "^C" where the output stands,
    # at a line's start when the last piece ended one
    [ "$(grep -ac '\[interrupted: ' "$T.pty")" -eq 2 ] ||
        fail "run -cnv: Ctrl-C did not end two answers: $(grep -an 'interrupted' "$T.pty" | cat -v)"
else
    echo "script(1) missing: -cnv checked through a pipe only"
fi
printf 'Hello\nHow are you?\n' | $RUN -cnv -n 6 --ignore-eos -no-perf --hide-think >"$T.cnv"
[ "$(grep -c . "$T.cnv")" -ge 2 ] || fail "run -cnv (pipe): [$(cat "$T.cnv")]"

ok
echo "it_cli_flags: ok"
