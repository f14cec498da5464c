#!/bin/sh
# Prefix cache through 2 real stages (tiny Q8_0, token-id prompts):
# - a 6-turn conversation (each prompt = the previous prompt + its answer
#   + a new user turn) gives the same tokens, greedy and seeded, and the
#   same logprobs (chosen token and its 20 alternatives: log-softmax of the
#   logits, within 1e-5) with the cache on and off; every turn after the
#   first restores at least the previous prompt + answer;
# - two requests sharing only a "system prompt" (ending at a message
#   boundary) both hit it, and a short prompt (< 100 tokens) extending a
#   cached one hits too (no block floor);
# - a tiny budget (evictions) falls back to prefill with identical output;
# - a stage restarted between turns (its checkpoints gone) falls back
#   cleanly: the next turn computes everything and is still identical;
# - the status shows each stage's entries, bytes and hit rate.
# P35_PREFIX_SPLIT (4): where the 2 stages split; e.g. 3.5, after layer 3's
# mixer (that stage holds layer 3's KV cache, the other none for it).
set -eu
. "$(dirname "$0")/lib.sh"
setup
SPLIT=${P35_PREFIX_SPLIT:-4}
T=$P35_RUN/t
# token ids: <|im_start|> opens every "message" (a boundary the cache saves at)
IM=$(printf '<|im_start|>' | "$BIN/qwen35-tokenize" -m "$M" 2>/dev/null | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
[ -n "$IM" ] || fail "cannot tokenize <|im_start|> with $M"

stages() {   # stages CACHE_MB
    p35_stage s0 "$M" "0:$SPLIT" --threads 1 --max-seqs 4 --max-ctx 2048 --cache-mb "$1"
    p35_stage s1 "$M" "$SPLIT:8" --threads 1 --max-seqs 4 --max-ctx 2048 --cache-mb "$1"
}
restage() {  # restage CACHE_MB: both stages restarted (new instances)
    p35_kill s0 TERM
    p35_kill s1 TERM
    stages "$1"
    p35_wait_ready 30
}
# ids N SEED: N pseudo-random ids in [10, 500)
ids() { awk -v n="$1" -v s="$2" 'BEGIN { x = s; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%d ", 10 + int(x / 65536) % 490 } }'; }
# run OUT PROMPTFILE [client opts]: one request, JSON events in OUT
run() {
    _o=$1 _p=$2
    shift 2
    p35_client --prompt-ids "$_p" --ignore-eos --json --logprobs 20 --timeout 60000 "$@" >"$_o" ||
        fail "request failed: $(tail -n 2 "$_o")"
}
gen_ids() { grep '"event":"piece"' "$1" | grep -o '"ids":\[[0-9,]*\]' | sed 's/.*\[//;s/\]//' | tr ',\n' '  ' | tr -s ' '; }
cached() { p35_field "$(grep '"event":"final"' "$1")" cached_tokens; }
logprobs() { grep '"event":"piece"' "$1" | grep -o '"logprob":[-0-9.e+]*\|"logprobs":\[[-0-9.e+,]*' | sed 's/.*[:[]//' | tr ',' '\n'; }

# conv TAG [client opts]: 6 turns; per turn the ids and logprobs in $T.TAG.N
conv() {
    _tag=$1
    shift
    : >"$T.$_tag.prompt"
    printf '%s %s ' "$IM" "$(ids 30 1)" >>"$T.$_tag.prompt"     # system prompt
    for turn in 1 2 3 4 5 6; do
        printf '%s %s ' "$IM" "$(ids 25 $((turn + 10)))" >>"$T.$_tag.prompt"   # user turn
        run "$T.$_tag.$turn" "$T.$_tag.prompt" -n 8 "$@"
        gen_ids "$T.$_tag.$turn" >"$T.$_tag.$turn.ids"
        logprobs "$T.$_tag.$turn" >"$T.$_tag.$turn.lp"
        cat "$T.$_tag.$turn.ids" >>"$T.$_tag.prompt"          # the answer
        wc -w <"$T.$_tag.prompt" >"$T.$_tag.$turn.len"
    done
}
same() {  # same TAG_A TAG_B WHAT
    for turn in 1 2 3 4 5 6; do
        cmp -s "$T.$1.$turn.ids" "$T.$2.$turn.ids" ||
            fail "$3: turn $turn: tokens differ: [$(cat "$T.$1.$turn.ids")] vs [$(cat "$T.$2.$turn.ids")]"
        d=$(paste "$T.$1.$turn.lp" "$T.$2.$turn.lp" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; n++ }
            END { if (n == 0) print "none"; else printf "%.3g", m }')
        [ "$d" != none ] || fail "$3: turn $turn: no logprobs"
        awk -v d="$d" 'BEGIN { exit !(d != "none" && d + 0 <= 1e-5) }' ||
            fail "$3: turn $turn: logprobs differ by $d (> 1e-5)"
        [ "$(wc -l <"$T.$1.$turn.lp")" = "$(wc -l <"$T.$2.$turn.lp")" ] ||
            fail "$3: turn $turn: different numbers of logprobs"
    done
    echo "$3: 6 turns, identical tokens, logprobs within 1e-5"
}

stages 64
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 2048
p35_wait_ready 30

# --- 6 turns, cache on: every later turn restores prompt + answer -----------
conv on-greedy
conv on-seeded --temp 0.8 --seed 7
for tag in on-greedy on-seeded; do
    c1=$(cached "$T.$tag.1")
    [ "${c1:-0}" -eq 0 ] || [ "$tag" = on-seeded ] || fail "$tag: turn 1 hit the cache ($c1) on a fresh pipeline"
    for turn in 2 3 4 5 6; do
        c=$(cached "$T.$tag.$turn")
        prev=$(( $(cat "$T.$tag.$((turn - 1)).len") - 1 ))   # the previous prompt + answer, but its last token
        [ "${c:-0}" -ge "$prev" ] || fail "$tag: turn $turn restored ${c:-0} tokens, expected >= $prev"
    done
    echo "$tag: turns 2-6 restored $(for t in 2 3 4 5 6; do printf '%s ' "$(cached "$T.$tag.$t")"; done)tokens"
done
sleep 1.2   # stage stats reach the coordinator about twice a second
st=$(p35_client --status --json)
hits=$(p35_field "$st" cache_hits)
[ "${hits:-0}" -ge 10 ] || fail "status: stage 0 cache_hits ${hits:-0}, expected >= 10: $st"
p35_client --status | grep -q "prefix cache:.*checkpoints" || fail "--status text shows no prefix cache line"
p35_client --status | grep "prefix cache" | head -n 3

# --- a shared system prompt: two requests both hit it -----------------------
printf '%s %s %s %s' "$IM" "$(ids 60 99)" "$IM" "$(ids 20 5)" >"$T.sys0"    # warms the cache
printf '%s %s %s %s' "$IM" "$(ids 60 99)" "$IM" "$(ids 20 6)" >"$T.sysA"
printf '%s %s %s %s' "$IM" "$(ids 60 99)" "$IM" "$(ids 20 7)" >"$T.sysB"
run "$T.s0" "$T.sys0" -n 2
run "$T.sA" "$T.sysA" -n 2
run "$T.sB" "$T.sysB" -n 2
for x in sA sB; do
    c=$(cached "$T.$x")
    [ "${c:-0}" -eq 61 ] || fail "shared system prompt: request $x restored ${c:-0} tokens, expected 61 (the system message)"
done
echo "shared system prompt: both requests restored $(cached "$T.sA") and $(cached "$T.sB") tokens"
# a short prompt (< 100 tokens) extending a cached one
printf '%s %s' "$(cat "$T.sysA")" "$(ids 5 8)" >"$T.short"
run "$T.sh" "$T.short" -n 2
c=$(cached "$T.sh")
[ "${c:-0}" -ge 80 ] || fail "short prompt (86 tokens) extending a cached one restored ${c:-0} tokens"
echo "short prompt of $(wc -w <"$T.short") tokens: ${c:-0} restored"

# --- the chat template: turn 2 extends turn 1 up to where the template
# rewrites history (the answer loses its think block): it hits up to there
printf 'hello there\nand once more\n' | p35_client --chat --no-think -n 6 --stats >"$T.chat" 2>"$T.chat.err" ||
    fail "--chat failed: $(tail -n 2 "$T.chat.err")"
c=$(grep -o '([0-9]* cached)' "$T.chat.err" | sed -n 2p | tr -dc 0-9)
[ "${c:-0}" -gt 0 ] || fail "chat turn 2 restored nothing: $(cat "$T.chat.err")"
echo "chat: turn 2 restored ${c:-0} tokens (up to the template's rewrite of turn 1's answer)"

# --- a stage restarted between turns: its checkpoints are gone ---------------
p35_kill s1 KILL
p35_stage s1 "$M" "$SPLIT:8" --threads 1 --max-seqs 4 --max-ctx 2048 --cache-mb 64
p35_wait_ready 30
run "$T.rs" "$T.on-greedy.prompt" -n 8
c=$(cached "$T.rs")
[ "${c:-0}" -eq 0 ] || fail "after a stage restart a request restored ${c:-0} tokens (its checkpoints are gone)"
run "$T.rs2" "$T.on-greedy.prompt" -n 8
c2=$(cached "$T.rs2")
[ "${c2:-0}" -gt 0 ] || fail "after a restart the cache never hits again"
[ "$(gen_ids "$T.rs")" = "$(gen_ids "$T.rs2")" ] || fail "restart: outputs differ with and without a hit"
echo "stage restarted: fell back to prefill (0 cached), then hit again ($c2 cached), same tokens"

# --- a tiny budget: evictions, identical output -----------------------------
# one checkpoint of tiny is ~0.3 MiB + 8 KiB per position per stage: 1 MiB holds a few
restage 1
conv tiny-greedy
same on-greedy tiny-greedy "tiny budget (1 MiB, evicting)"
st=$(p35_client --status --json)
ev=$(p35_field "$st" cache_evictions)
[ "${ev:-0}" -gt 0 ] || fail "tiny budget: the coordinator evicted nothing: $st"
sleep 1.2
st=$(p35_client --status --json)
printf '%s' "$st" | grep -o '"cache_bytes":[0-9]*,"cache_budget":[0-9]*' | awk -F'[:,]' '$2 > $4 { bad = 1 } END { exit bad }' ||
    fail "tiny budget: a stage holds more than its budget: $st"
echo "tiny budget: $ev checkpoints evicted; stores within budget: $(printf '%s' "$st" | grep -o '"cache_bytes":[0-9]*' | tr '\n' ' ')"

# --- cache off: the reference ------------------------------------------------
restage 0
conv off-greedy
conv off-seeded --temp 0.8 --seed 7
same on-greedy off-greedy "greedy, cache on vs off"
same on-seeded off-seeded "seeded, cache on vs off"
for turn in 2 6; do
    c=$(cached "$T.off-greedy.$turn")
    [ "${c:-0}" -eq 0 ] || fail "cache off: turn $turn restored ${c:-0} tokens"
done
ok "prefix cache: identical on/off, shared prompts hit, restart and eviction fall back"
