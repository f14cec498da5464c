#!/bin/sh
# Speculative decoding changes no token. Random weights accept almost no
# draft a model would make, so the drafts here come from the bench oracle
# (a recorded plain run of the request; each draft right with probability
# alpha, else a token that cannot match), which runs every path: drafts
# all accepted, refused at every place, none. Golden tiny model:
# - 2 stages: greedy, seeded (temp 1), penalties and a grammar, each at
#   alpha 0, 0.5, 1 and 1..4 drafts: the ids equal the plain run's; the
#   final event counts the drafts, /status per stage;
# - 16 streams at once (alpha 0.6, 3 drafts): every one identical;
# - 3 stages (half-layer cuts): identical;
# - the middle stage SIGKILLed mid-request and restarted: identical;
# - the prefix cache on: a second turn that extends the first (restored
#   from the checkpoint the first left behind drafts): identical;
# - the draft length adapts (at alpha 0 the drafts stop);
# - refused: an oracle without bench-draft-oracle, alpha out of range.
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-client
T=$P35_RUN/s
ids64 "$T.p64"
N=48

stage() { p35_stage "$1" "$M" "$2" --threads 1 --max-seqs 16 --max-ctx 1024; }
start2() {
    stage s0 0:4
    stage s1 4:8
    p35_coord "$M" s0 s1 -- --max-seqs 16 --max-ctx 1024 --draft 4 "$@"
    p35_wait_ready 30
}
start2 --bench-draft-oracle --no-draft-adapt --step-timeout-ms 3000 --replay-wait-ms 20000

# ref NAME FLAGS...: the plain run's ids in $T.NAME
ref() {
    _n=$1
    shift
    p35_client --prompt-ids "$T.p64" -n $N --ignore-eos --ids --no-draft "$@" >"$T.$_n" ||
        fail "$_n: the plain request failed"
}
# same NAME ALPHA DRAFT FLAGS...: with oracle drafts, the same ids; the
# final event's counts in $DRAFTED $ACCEPTED (--stats)
same() {
    _n=$1 _a=$2 _k=$3
    shift 3
    p35_client --prompt-ids "$T.p64" -n $N --ignore-eos --ids --draft "$_k" --draft-oracle "$T.$_n" \
        --draft-alpha "$_a" --stats "$@" >"$T.$_n.got" 2>"$T.$_n.stats" ||
        fail "$_n alpha $_a draft $_k: the request failed: $(cat "$T.$_n.stats")"
    cmp -s "$T.$_n" "$T.$_n.got" ||
        fail "$_n alpha $_a draft $_k: [$(cat "$T.$_n.got")] differs from the plain run [$(cat "$T.$_n")]"
    DRAFTED=$(sed -n 's/.* \([0-9]*\) of \([0-9]*\) drafts accepted.*/\2/p' "$T.$_n.stats")
    ACCEPTED=$(sed -n 's/.* \([0-9]*\) of \([0-9]*\) drafts accepted.*/\1/p' "$T.$_n.stats")
    DRAFTED=${DRAFTED:-0} ACCEPTED=${ACCEPTED:-0}
}

ref greedy --temp 0
ref seeded --temp 1 --seed 7
ref penal --temp 0.8 --seed 3 --repeat-penalty 1.3 --presence-penalty 0.5
printf '%s\n' 'root ::= [a-z ]{1,400}' >"$T.gbnf"
ref gram --temp 1 --seed 5 --grammar-file "$T.gbnf"
for name in greedy seeded penal gram; do
    case $name in
    greedy) f="--temp 0" ;;
    seeded) f="--temp 1 --seed 7" ;;
    penal) f="--temp 0.8 --seed 3 --repeat-penalty 1.3 --presence-penalty 0.5" ;;
    gram) f="--temp 1 --seed 5 --grammar-file $T.gbnf" ;;
    esac
    for a in 1 0.5 0; do
        for k in 1 2 4; do
            # shellcheck disable=SC2086
            same $name $a $k $f
            [ "$DRAFTED" -gt 0 ] || [ "$a" = 0 ] || fail "$name alpha $a draft $k: no draft verified"
            [ "$a" != 1 ] || [ "$ACCEPTED" = "$DRAFTED" ] ||
                fail "$name alpha 1 draft $k: $ACCEPTED of $DRAFTED drafts accepted, expected all"
            [ "$a" != 0 ] || [ "$ACCEPTED" = 0 ] || fail "$name alpha 0: $ACCEPTED drafts accepted"
        done
    done
    echo "$name: identical at alpha 1, 0.5, 0 with 1, 2, 4 drafts"
done
same seeded 0.5 3 --temp 1 --seed 7
[ "$ACCEPTED" -gt 0 ] && [ "$ACCEPTED" -lt "$DRAFTED" ] ||
    fail "alpha 0.5: $ACCEPTED of $DRAFTED accepted: expected some, not all"
echo "alpha 0.5, 3 drafts: $ACCEPTED of $DRAFTED accepted"
p35_client --status >"$T.status" || fail "status failed"
grep -q 'drafts: [1-9][0-9]* verified' "$T.status" || fail "status: no per-stage draft counts: $(cat "$T.status")"
grep -q 'speculative decoding: [1-9][0-9]* drafts verified' "$T.status" || fail "status: no draft totals"

# 16 streams at once
i=0
while [ $i -lt 16 ]; do
    p35_bg_client "$T.m$i" --prompt-ids "$T.p64" -n $N --ignore-eos --ids --no-draft --temp 1 --seed $((100 + i))
    eval "pid$i=\$P35_LAST"
    i=$((i + 1))
done
i=0
while [ $i -lt 16 ]; do
    eval "wait \$pid$i" || fail "plain stream $i failed"
    i=$((i + 1))
done
i=0
while [ $i -lt 16 ]; do
    p35_bg_client "$T.m$i.out" --prompt-ids "$T.p64" -n $N --ignore-eos --ids --draft 3 --draft-oracle "$T.m$i" \
        --draft-alpha 0.6 --temp 1 --seed $((100 + i)) --timeout 60000
    eval "pid$i=\$P35_LAST"
    i=$((i + 1))
done
i=0
while [ $i -lt 16 ]; do
    eval "wait \$pid$i" || fail "stream $i failed: $(cat "$T.m$i.out.err")"
    cmp -s "$T.m$i" "$T.m$i.out" || fail "stream $i: [$(cat "$T.m$i.out")] differs from [$(cat "$T.m$i")]"
    i=$((i + 1))
done
echo "16 streams at once, alpha 0.6, 3 drafts: every one identical"

# a stage killed mid-request: the sequences are rebuilt, the tokens the same
p35_client --prompt-ids "$T.p64" -n 400 --ignore-eos --ids --no-draft --temp 1 --seed 11 >"$T.long" ||
    fail "long: the plain request failed"
: >"$T.run"
p35_bg_client "$T.run" --prompt-ids "$T.p64" -n 400 --ignore-eos --ids --draft 2 --draft-oracle "$T.long" \
    --draft-alpha 0.7 --temp 1 --seed 11 --timeout 60000
pid=$P35_LAST
sleep 0.3
p35_kill s0 KILL
sleep 0.5
stage s0 0:4
wait "$pid" || fail "replay: the request failed after the stage came back: $(cat "$T.run.err")"
grep -q 'rebuilding [1-9]' "$P35_RUN/coord.log" || fail "replay: the kill rebuilt nothing (it hit no stream)"
cmp -s "$T.long" "$T.run" || fail "replay: [$(cat "$T.run")] differs from [$(cat "$T.long")]"
echo "replay: stage 0 killed mid-request: identical"

# the prefix cache: turn 2 extends turn 1's prompt + answer
cat "$T.p64" "$T.greedy" | tr -s ' \n' '\n' | grep . >"$T.turn2"
seq 5 40 >>"$T.turn2"
p35_client --prompt-ids "$T.turn2" -n $N --ignore-eos --ids --no-draft --temp 0 >"$T.t2ref" || fail "turn 2 plain failed"
p35_client --prompt-ids "$T.p64" -n $N --ignore-eos --ids --draft 3 --draft-oracle "$T.greedy" --draft-alpha 0.5 \
    --temp 0 >"$T.t1" || fail "turn 1 failed"
p35_client --prompt-ids "$T.turn2" -n $N --ignore-eos --ids --draft 3 --draft-oracle "$T.t2ref" --draft-alpha 0.5 \
    --temp 0 --stats >"$T.t2" 2>"$T.t2.stats" || fail "turn 2 failed: $(cat "$T.t2.stats")"
cached=$(sed -n 's/.*prompt tokens (\([0-9]*\) cached).*/\1/p' "$T.t2.stats")
[ "${cached:-0}" -gt 64 ] || fail "turn 2: ${cached:-no} prompt tokens restored, expected turn 1's (> 64): $(cat "$T.t2.stats")"
cmp -s "$T.t2" "$T.t2ref" || fail "turn 2 with the prefix cache: [$(cat "$T.t2")] differs from [$(cat "$T.t2ref")]"
echo "prefix cache: turn 2 restored $cached tokens and is identical"

# the draft length adapts: at alpha 0 drafting stops (a probe now and then)
p35_stop
start2 --bench-draft-oracle
same seeded 0 4 --temp 1 --seed 7
[ "$DRAFTED" -lt 24 ] || fail "adaptive, alpha 0: $DRAFTED drafts verified for $N tokens (4 a step without adapting)"
d0=$DRAFTED
same seeded 1 4 --temp 1 --seed 7
[ "$DRAFTED" -gt 0 ] && [ "$ACCEPTED" = "$DRAFTED" ] || fail "adaptive, alpha 1: $ACCEPTED of $DRAFTED accepted"
echo "adaptive: alpha 0: $d0 drafts verified for $N tokens; alpha 1: $DRAFTED, all accepted"

# refusals
if p35_client --prompt-ids "$T.p64" -n 4 --draft-oracle "$T.greedy" --draft-alpha 1.5 >/dev/null 2>"$T.e1"; then
    fail "alpha 1.5 was accepted"
fi
grep -q 'draft-alpha' "$T.e1" || fail "alpha 1.5: $(cat "$T.e1")"
p35_stop
start2
if p35_client --prompt-ids "$T.p64" -n 4 --draft-oracle "$T.greedy" >/dev/null 2>"$T.e2"; then
    fail "an oracle was accepted without bench-draft-oracle"
fi
grep -q 'generate.draft_oracle: benchmarks only' "$T.e2" || fail "oracle refused how: $(cat "$T.e2")"
echo "refused: $(head -n 1 "$T.e2")"

# three stages, half-layer cuts
p35_stop
stage s0 0:3.5
stage s1 3.5:6
stage s2 6:8
p35_coord "$M" s0 s1 s2 -- --max-seqs 16 --max-ctx 1024 --draft 4 --bench-draft-oracle --no-draft-adapt
p35_wait_ready 30
for a in 1 0.5; do same seeded $a 3 --temp 1 --seed 7; done
echo "3 stages (0:3.5, 3.5:6, 6:8): identical at alpha 1 and 0.5"
# the real drafter: a generated model with an MTP head (mtp = on on the
# last stage), its own drafts, greedy and seeded: the same tokens as
# without drafts
p35_stop
p35_clear_logs
"$BIN/qwen35-mkmodel" --mtp --seed 3 -o "$T.mtp.gguf" >/dev/null ||
    fail "qwen35-mkmodel --mtp failed"
p35_stage m0 "$T.mtp.gguf" 0:4 --threads 1 --max-seqs 4 --max-ctx 512
p35_stage m1 "$T.mtp.gguf" 4:8 --threads 1 --max-seqs 4 --max-ctx 512 --mtp
p35_coord "$T.mtp.gguf" m0 m1 -- --max-seqs 4 --max-ctx 512 --draft 3 --no-draft-adapt
p35_wait_ready 30
p35_client --status | grep -q . || fail "status"
for f in "--temp 0" "--temp 1 --seed 4"; do
    # shellcheck disable=SC2086
    p35_client --prompt-ids "$T.p64" -n 40 --ignore-eos --ids --no-draft $f >"$T.h0" || fail "mtp [$f]: plain failed"
    # shellcheck disable=SC2086
    p35_client --prompt-ids "$T.p64" -n 40 --ignore-eos --ids --draft 3 --stats $f >"$T.h1" 2>"$T.h1.err" ||
        fail "mtp [$f]: with drafts failed: $(cat "$T.h1.err")"
    cmp -s "$T.h0" "$T.h1" || fail "mtp [$f]: [$(cat "$T.h1")] differs from [$(cat "$T.h0")]"
    grep -q ' of [1-9][0-9]* drafts accepted' "$T.h1.err" || fail "mtp [$f]: no draft verified: $(cat "$T.h1.err")"
    echo "MTP head [$f]: identical, $(sed -n 's/.*, \([0-9]* of [0-9]*\) drafts accepted.*/\1/p' "$T.h1.err") drafts accepted"
done
ok "speculative decoding keeps every token"
