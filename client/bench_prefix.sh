#!/bin/sh
# make bench-prefix — what the prefix cache buys, on the generated mini
# model (4 layers of the real 35B-A3B sizes, 64 experts, the Qwen3
# vocabulary) through 2 stages (layers 0:2 and 2:4, 1 thread each,
# cache-mb 256):
#  1. an 8-turn chat whose history grows to ~3000 tokens (user turns of 300
#     tokens, answers of 64; each prompt = the previous prompt + answer + a
#     new user turn, token ids with <|im_start|> opening every message):
#     time to first token per turn, prompt tokens computed, total time,
#     and the ceiling the token counts allow (prompt / computed: what the
#     speedup would be if a warm token cost what a cold one does).
#     Targets: turn 1 (nothing to reuse) >= 0.95x the cache-off TTFT; turn
#     8's speedup >= 90% of its ceiling.
#  1b. the chat's turn 1 is one sample, and each pipeline's first request:
#     BENCH_FIRSTS (5) more first turns (a 40-token system message and a
#     USER-token user message, each conversation its own tokens, so nothing
#     is cached), off and on alternating which runs first: the median TTFT
#     of each, and their ratio against the turn-1 target.
#  2. 16 requests sharing a 1000-token system prompt, differing after it
#     (one first, then 15 at once): prompt tokens computed, time. Target:
#     the shared 1000 computed once.
#  3. a prompt of < 100 tokens extending a cached one: it hits.
#  3b. branching: two continuations A and B of one BENCH_BRANCH-token
#     history (default 2000; 0: skipped), alternating A1 B1 A2 B2 .. for
#     BENCH_BRANCH_TURNS (4) turns each (user turns of BENCH_BRANCH_USER,
#     100, answers of BENCH_BRANCH_ANSWER, 32): prompt tokens computed and
#     TTFT per turn off and on; target: every turn after A1 restores the
#     shared history, answers identical off and on.
#  4. each stage's RSS at the end, cache on minus cache off (the same
#     requests touched the same slots in both). Target: < 300 MB.
#  5. for each length L of BENCH_LONG (default 23000; 0: skipped): a
#     conversation of user turns of BENCH_LONG_TURN (2000) tokens and
#     answers of 32 until the prompt holds L tokens, run warm with the
#     cache; its last prompt also cold without it (fresh pipelines of one
#     slot, max-ctx for L): TTFT of each warm turn per computed token (no
#     cliff as the context grows), the last turn's speedup beside its
#     ceiling, and the same answer ids both ways. Lengths whose KV cache
#     and checkpoints do not fit in the memory available are skipped with
#     a message. 23000 takes ~10 min on 2 idle cores; 112000 over an hour.
# Cache off and on are two pipelines of their own (2 stages + coordinator
# each, prefix-cache off / on) run turn by turn in alternation, so the
# load of a shared machine falls on both alike.
#
# Env: BIN, QWEN35_GOLDEN, BENCH_MODEL (default build/models/mini-4L-64x-q4_k_m.gguf;
# generated when missing), BENCH_THREADS (1 per stage), BENCH_TURNS (8),
# BENCH_USER (300), BENCH_ANSWER (64), BENCH_SHARED (1000), BENCH_REQS (16),
# BENCH_LONG (23000), BENCH_LONG_TURN (2000), BENCH_BRANCH (2000), BENCH_BRANCH_TURNS (4),
# BENCH_BRANCH_USER (100), BENCH_BRANCH_ANSWER (32), BENCH_FIRSTS (5), BENCH_TRACE (a file: the cache-on
# coordinator's --trace).
set -eu
P35_ME=bench-prefix
. "$(dirname "$0")/pipeline.sh"

GOLDEN=${QWEN35_GOLDEN:-../shared/golden}
MODEL=${BENCH_MODEL:-${QWEN35_BUILD:-build}/models/mini-4L-64x-q4_k_m.gguf}
THREADS=${BENCH_THREADS:-1}
TURNS=${BENCH_TURNS:-8}
USER=${BENCH_USER:-300}
ANSWER=${BENCH_ANSWER:-64}
SHARED=${BENCH_SHARED:-1000}
REQS=${BENCH_REQS:-16}
LONG=${BENCH_LONG-23000}
LONG_TURN=${BENCH_LONG_TURN:-2000}
BRANCH=${BENCH_BRANCH-2000}
FIRSTS=${BENCH_FIRSTS:-5}
BRANCH_TURNS=${BENCH_BRANCH_TURNS:-4}
BRANCH_USER=${BENCH_BRANCH_USER:-100}
BRANCH_ANSWER=${BENCH_BRANCH_ANSWER:-32}
CACHE_MB=256

if [ ! -f "$MODEL" ]; then
    [ -x "$BIN/qwen35-mkmodel" ] || p35_die "$BIN/qwen35-mkmodel missing (run make first)"
    mkdir -p "$(dirname "$MODEL")"
    VOCAB=$GOLDEN/tokenizer/qwen3-vocab.gguf
    set -- --preset mini --experts 64 --types q4_k_m -o "$MODEL"
    [ -f "$VOCAB" ] && set -- "$@" --vocab-from "$VOCAB"
    echo "bench-prefix: generating $MODEL: qwen35-mkmodel $*"
    "$BIN/qwen35-mkmodel" "$@"
fi

p35_init
T=$P35_RUN/t
IM=$(printf '<|im_start|>' | "$BIN/qwen35-tokenize" -m "$MODEL" | tr -s ' \n' ' ' | sed 's/^ //;s/ $//')
case $IM in ''|*' '*) p35_die "$MODEL: <|im_start|> is not one token ($IM)" ;; esac
# ids N SEED: N pseudo-random ordinary token ids in [1000, 60000)
ids() { awk -v n="$1" -v s="$2" 'BEGIN { x = s; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%d ", 1000 + int(x / 32) % 59000 } }'; }
gen_ids() { grep '"event":"piece"' "$1" | grep -o '"ids":\[[0-9,]*\]' | sed 's/.*\[//;s/\]//' | tr ',\n' '  ' | tr -s ' '; }
final() { grep '"event":"final"' "$1"; }
rss_mb() { awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status"; }
now() { date +%s.%N; }

for x in a b; do
    p35_stage ${x}0 "$MODEL" 0:2 --threads "$THREADS" --max-seqs "$REQS" --max-ctx 4096 --cache-mb $CACHE_MB
    p35_stage ${x}1 "$MODEL" 2:4 --threads "$THREADS" --max-seqs "$REQS" --max-ctx 4096 --cache-mb $CACHE_MB
done
copts="--max-seqs $REQS --max-ctx 4096 --step-timeout-ms 600000"
# shellcheck disable=SC2086
p35_coord "$MODEL" a0 a1 -- $copts --prefix-cache off
EP_off=$P35_EP
EP_on="ipc://$P35_RUN/coord-on.sock"
_l0=$P35_LAYERS_b0 _l1=$P35_LAYERS_b1
# shellcheck disable=SC2086
"$BIN/qwen35-coordinator" --model "$MODEL" --listen "$EP_on" --stage "ipc://$P35_RUN/b0.sock $_l0" \
    --stage "ipc://$P35_RUN/b1.sock $_l1" $copts --prefix-cache on ${BENCH_TRACE:+--trace "$BENCH_TRACE"} \
    >>"$P35_RUN/coord-on.log" 2>&1 &
P35_PID_coordon=$!
P35_NAMES="$P35_NAMES coordon"
p35_wait_ready 600
P35_EP=$EP_on
p35_wait_ready 600
P35_EP=$EP_off
cli() { _ep=$1; shift; "$BIN/qwen35-client" --endpoint "$_ep" "$@"; }

# chat: TURNS turns on both pipelines, alternating; one line per turn in
# $T.off.rows and $T.on.rows, the wall time of each in $T.TAG.total
chat() {
    for tag in off on; do
        : >"$T.$tag.rows"
        printf '%s %s ' "$IM" "$(ids 40 1)" >"$T.$tag.prompt"
        echo 0 >"$T.$tag.total"
    done
    for turn in $(seq 1 "$TURNS"); do
        for tag in off on; do
            eval "ep=\$EP_$tag"
            printf '%s %s ' "$IM" "$(ids $((USER - 1)) $((turn + 100)))" >>"$T.$tag.prompt"
            _t0=$(now)
            cli "$ep" --prompt-ids "$T.$tag.prompt" -n "$ANSWER" --ignore-eos --json \
                --timeout 600000 >"$T.$tag.$turn" || p35_die "$tag turn $turn failed: $(tail -n 1 "$T.$tag.$turn")"
            echo "$(now) $_t0 $(cat "$T.$tag.total")" | awk '{ printf "%.1f", $3 + $1 - $2 }' >"$T.$tag.total.new"
            mv "$T.$tag.total.new" "$T.$tag.total"
            f=$(final "$T.$tag.$turn")
            p=$(p35_field "$f" prompt_tokens) c=$(p35_field "$f" cached_tokens) tt=$(p35_field "$f" ttft_s)
            echo "$turn $p ${c:-0} $tt" >>"$T.$tag.rows"
            gen_ids "$T.$tag.$turn" >>"$T.$tag.prompt"
        done
    done
}

# firsts: FIRSTS first turns on both pipelines, the order alternating;
# "TAG ttft" lines in $T.firsts
firsts() {
    : >"$T.firsts"
    for i in $(seq 1 "$FIRSTS"); do
        printf '%s %s %s %s ' "$IM" "$(ids 40 $((500 + i)))" "$IM" "$(ids $((USER - 1)) $((600 + i)))" >"$T.first.$i"
        order="off on"
        [ $((i % 2)) -eq 0 ] && order="on off"
        for tag in $order; do
            eval "ep=\$EP_$tag"
            cli "$ep" --prompt-ids "$T.first.$i" -n 4 --ignore-eos --json --timeout 600000 >"$T.first.$tag.$i" ||
                p35_die "$tag first turn $i failed: $(tail -n 1 "$T.first.$tag.$i")"
            f=$(final "$T.first.$tag.$i")
            [ "$(p35_field "$f" cached_tokens)" -gt 0 ] 2>/dev/null && p35_die "first turn $i: $tag restored a prefix"
            echo "$tag $(p35_field "$f" ttft_s)" >>"$T.firsts"
        done
    done
}

# shared TAG: REQS requests sharing a SHARED-token system prompt, one
# first, then the others at once; figures in $T.TAG.shared
printf '%s %s ' "$IM" "$(ids $((SHARED - 1)) 7)" >"$T.sys"
req_prompt() { printf '%s %s %s' "$(cat "$T.sys")" "$IM" "$(ids 49 $((1000 + $1)))" >"$T.sys.$1"; }
shared() {
    _tag=$1
    eval "_ep=\$EP_$_tag"
    for i in $(seq 1 "$REQS"); do req_prompt "$i"; done
    _t0=$(now)
    cli "$_ep" --prompt-ids "$T.sys.1" -n 8 --ignore-eos --json --timeout 600000 >"$T.$_tag.sys.1" ||
        p35_die "shared request 1 failed"
    _pids=""
    for i in $(seq 2 "$REQS"); do
        "$BIN/qwen35-client" --endpoint "$_ep" --prompt-ids "$T.sys.$i" -n 8 --ignore-eos --json \
            --timeout 600000 >"$T.$_tag.sys.$i" 2>"$T.$_tag.sys.$i.err" &
        _pids="$_pids $!"
    done
    for p in $_pids; do wait "$p" || p35_die "a shared-prompt request failed"; done
    _t1=$(now)
    _comp=0 _tot=0 _hits=0
    for i in $(seq 1 "$REQS"); do
        f=$(final "$T.$_tag.sys.$i")
        p=$(p35_field "$f" prompt_tokens) c=$(p35_field "$f" cached_tokens)
        _comp=$((_comp + p - ${c:-0})) _tot=$((_tot + p))
        [ "${c:-0}" -ge "$SHARED" ] && _hits=$((_hits + 1))
    done
    echo "$_tot $_comp $_hits $(echo "$_t1 $_t0" | awk '{ printf "%.1f", $1 - $2 }')" >"$T.$_tag.shared"
}

echo "bench-prefix: $MODEL, 2 pipelines (cache off, on) of 2 stages x $THREADS thread(s), cache-mb $CACHE_MB"
chat
[ "$FIRSTS" -gt 0 ] && firsts
shared off
shared on
echo
echo "1. $TURNS-turn chat (user $USER, answers $ANSWER tokens): cache off vs on"
printf '%-5s %8s | %9s %10s | %9s %8s %10s %7s %7s %6s\n' turn prompt computed "ttft off" computed cached \
    "ttft on" speedup ceiling "of it"
paste -d' ' "$T.off.rows" "$T.on.rows" | awk '{
    sp = $8 > 0 ? $4 / $8 : 0; ceil = $6 > $7 ? $6 / ($6 - $7) : 0
    printf "%-5d %8d | %9d %9.3fs | %9d %8d %9.3fs %6.2fx %6.1fx %5.0f%%\n", $1, $2, $2 - $3, $4, $6 - $7, $7, $8,
        sp, ceil, (ceil > 0 ? 100 * sp / ceil : 0)
    off += $2 - $3; on += $6 - $7
    if (NR == 1) first = sp
    last = sp; lceil = ceil }
    END { printf "prefill tokens computed: %d off, %d on\n", off, on
          printf "%.2f %.2f %.2f\n", first, last, lceil > "/dev/stderr" }' 2>"$T.ratio"
echo "total time: $(cat "$T.off.total") s off, $(cat "$T.on.total") s on"
read first ratio ceil <"$T.ratio"
awk -v r="$first" 'BEGIN { exit !(r >= 0.95) }' && v=holds || v="does NOT hold"
echo "turn 1 (nothing cached) at ${first}x the cache-off TTFT (target >= 0.95x): $v"
if [ "$FIRSTS" -gt 0 ]; then
    med() { grep "^$1 " "$T.firsts" | cut -d' ' -f2 | sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    m_off=$(med off) m_on=$(med on)
    r1=$(awk -v a="$m_off" -v b="$m_on" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    awk -v r="$r1" 'BEGIN { exit !(r >= 0.95) }' && v=holds || v="does NOT hold"
    echo "first turns ($FIRSTS more, $((USER + 41)) tokens, order alternating): median TTFT $m_off s off, $m_on s on: ${r1}x (target >= 0.95x): $v"
fi
awk -v r="$ratio" -v c="$ceil" 'BEGIN { exit !(r >= 0.9 * c) }' && v=holds || v="does NOT hold"
echo "turn $TURNS TTFT ${ratio}x lower with the cache, ceiling ${ceil}x (target >= 90% of it): $v"

echo
echo "2. $REQS requests sharing a $SHARED-token system prompt (one first, then $((REQS - 1)) at once)"
read tot comp_off hits_off t_off <"$T.off.shared"
read tot comp_on hits_on t_on <"$T.on.shared"
suffix=$((tot / REQS - SHARED))
echo "prompt tokens: $tot; computed: $comp_off off ($t_off s), $comp_on on ($t_on s); the shared $SHARED once + $REQS x $suffix differing = $((SHARED + REQS * suffix)); $hits_on of $((REQS - 1)) later requests restored the shared prompt"
[ "$comp_on" -le $((SHARED + REQS * suffix)) ] && [ "$hits_on" -ge $((REQS - 1)) ] && v=holds || v="does NOT hold"
echo "shared $SHARED tokens computed once: $v"

echo
echo "3. a prompt of < 100 tokens extending a cached one"
printf '%s %s' "$IM" "$(ids 39 31)" >"$T.short1"
printf '%s %s %s' "$(cat "$T.short1")" "$IM" "$(ids 39 32)" >"$T.short2"
cli "$EP_on" --prompt-ids "$T.short1" -n 4 --ignore-eos --json >"$T.short1.out"
cli "$EP_on" --prompt-ids "$T.short2" -n 4 --ignore-eos --json >"$T.short2.out"
f=$(final "$T.short2.out")
c=$(p35_field "$f" cached_tokens)
echo "$(p35_field "$f" prompt_tokens)-token prompt extending a 40-token one: ${c:-0} tokens restored: $([ "${c:-0}" -ge 40 ] && echo holds || echo 'does NOT hold')"

# branch: two continuations A and B of one BRANCH-token history, turns
# A1 B1 A2 B2 .. (each branch its own growing conversation: the previous
# prompt + its answer + a new user turn of BRANCH_USER), on both
# pipelines turn by turn; every turn but A1 should restore at least the
# shared history (A1 and B1 part after it), and the answers are the same
# with the cache on and off
if [ "$BRANCH" -gt 0 ]; then
    echo
    echo "3b. branching: two continuations of one $BRANCH-token history, alternating ($BRANCH_TURNS turns each, user turns of $BRANCH_USER, answers of $BRANCH_ANSWER)"
    printf '%s %s ' "$IM" "$(ids $((BRANCH - 1)) 41)" >"$T.hist"
    for tag in off on; do for br in A B; do cp "$T.hist" "$T.$tag.br$br"; done; done
    : >"$T.branch.rows"
    bsame=1
    for k in $(seq 1 "$BRANCH_TURNS"); do
        for br in A B; do
            seed=$((k * 2 + 600)); [ $br = B ] && seed=$((seed + 1))
            line="$br$k"
            for tag in off on; do
                eval "ep=\$EP_$tag"
                bp=$T.$tag.br$br
                printf '%s %s ' "$IM" "$(ids $((BRANCH_USER - 1)) $seed)" >>"$bp"
                cli "$ep" --prompt-ids "$bp" -n "$BRANCH_ANSWER" --ignore-eos --json --timeout 600000 \
                    >"$T.$tag.br.$br$k" || p35_die "branch $br turn $k ($tag) failed: $(tail -n 1 "$T.$tag.br.$br$k")"
                f=$(final "$T.$tag.br.$br$k")
                p=$(p35_field "$f" prompt_tokens) c=$(p35_field "$f" cached_tokens) tt=$(p35_field "$f" ttft_s)
                line="$line $p ${c:-0} $tt"
                gen_ids "$T.$tag.br.$br$k" >>"$bp"
            done
            [ "$(gen_ids "$T.off.br.$br$k")" = "$(gen_ids "$T.on.br.$br$k")" ] || bsame=0
            echo "$line" >>"$T.branch.rows"
        done
    done
    printf '%-5s %8s | %9s %10s | %9s %8s %10s %7s\n' turn prompt computed "ttft off" computed cached "ttft on" speedup
    awk -v h="$BRANCH" '{
        sp = $7 > 0 ? $4 / $7 : 0
        printf "%-5s %8d | %9d %9.3fs | %9d %8d %9.3fs %6.2fx\n", $1, $2, $2 - $3, $4, $5 - $6, $6, $7, sp
        if ($1 != "A1" && $6 < h) miss++
        off += $2 - $3; on += $5 - $6 }
        END { printf "prefill tokens computed: %d off, %d on\n", off, on
              printf "every turn after A1 restored the shared %d-token history (or more): %s\n", h,
                  miss ? "does NOT hold (" miss " turns)" : "holds" }' "$T.branch.rows"
    [ "$bsame" = 1 ] && v=identical || v=DIFFER
    echo "answer ids with the cache on and off, every turn of both branches: $v"
fi

echo
echo "4. stage memory (cache-mb $CACHE_MB): RSS at the end, cache on minus cache off"
sleep 1.5
cli "$EP_on" --status | grep -i "prefix cache" || true
for i in 0 1; do
    eval "pa=\$P35_PID_a$i pb=\$P35_PID_b$i"
    a=$(rss_mb "$pa") b=$(rss_mb "$pb")
    echo "stage $i: RSS $a MB (cache off), $b MB (cache on): growth $((b - a)) MB (target < 300): $([ $((b - a)) -lt 300 ] && echo holds || echo 'does NOT hold')"
done

# ---- 5. long conversations -----------------------------------------------
# The pipelines above are done with: their memory goes back first (a
# stop, not a kill: the cache-on coordinator completes its BENCH_TRACE).
P35_NAMES="a0 a1 b0 b1 coord coordon"
p35_stop
P35_NAMES=""
LANS=32
mem_avail_mb() { awk '/^MemAvailable/ { printf "%d", $2 / 1024 }' /proc/meminfo; }
long_case() {
    L=$1
    ctx=$(( (L + LONG_TURN + 2 * LANS + 1024) / 1024 * 1024 ))
    # stage 1 holds the attention layer: 4 KiB a position on this model;
    # three checkpoints of the whole context fit the store
    kv_mb=$(( ctx * 4 / 1024 + 1 ))
    cmb=$(( 3 * (kv_mb + 8) ))
    need=$(( 2 * kv_mb + cmb + 2 * 1100 ))
    echo
    echo "5. a conversation to $L tokens (user turns of $LONG_TURN, answers of $LANS; max-ctx $ctx, cache-mb $cmb)"
    if [ "$(mem_avail_mb)" -lt "$need" ]; then
        echo "skipped: needs ~$need MB, $(mem_avail_mb) MB available"
        return 0
    fi
    for x in c d; do
        p35_stage ${x}0 "$MODEL" 0:2 --threads "$THREADS" --max-seqs 1 --max-ctx $ctx --cache-mb $cmb
        p35_stage ${x}1 "$MODEL" 2:4 --threads "$THREADS" --max-seqs 1 --max-ctx $ctx --cache-mb $cmb
    done
    lopts="--max-seqs 1 --max-ctx $ctx --step-timeout-ms 600000"
    for x in c d; do
        eval "_l0=\$P35_LAYERS_${x}0 _l1=\$P35_LAYERS_${x}1"
        pc=off; [ $x = d ] && pc=on
        # shellcheck disable=SC2086
        "$BIN/qwen35-coordinator" --model "$MODEL" --listen "ipc://$P35_RUN/co$x.sock" \
            --stage "ipc://$P35_RUN/${x}0.sock $_l0" --stage "ipc://$P35_RUN/${x}1.sock $_l1" \
            $lopts --prefix-cache $pc >>"$P35_RUN/co$x.log" 2>&1 &
        eval "P35_PID_co$x=\$!"
        P35_NAMES="$P35_NAMES co$x"
        P35_EP="ipc://$P35_RUN/co$x.sock"
        p35_wait_ready 600
    done
    lp=$T.long.prompt
    printf '%s %s ' "$IM" "$(ids 40 3)" >"$lp"
    turn=0
    : >"$T.long.rows"
    while :; do
        turn=$((turn + 1))
        printf '%s %s ' "$IM" "$(ids $((LONG_TURN - 1)) $((turn + 500)))" >>"$lp"
        cli "ipc://$P35_RUN/cod.sock" --prompt-ids "$lp" -n $LANS --ignore-eos --json --timeout 3600000 \
            >"$T.long.$turn" || p35_die "long turn $turn failed: $(tail -n 1 "$T.long.$turn")"
        f=$(final "$T.long.$turn")
        p=$(p35_field "$f" prompt_tokens) c=$(p35_field "$f" cached_tokens) tt=$(p35_field "$f" ttft_s)
        echo "$turn $p ${c:-0} $tt" >>"$T.long.rows"
        [ "$p" -ge "$L" ] && break
        gen_ids "$T.long.$turn" >>"$lp"
    done
    cli "ipc://$P35_RUN/coc.sock" --prompt-ids "$lp" -n $LANS --ignore-eos --json --timeout 3600000 \
        >"$T.long.cold" || p35_die "long cold run failed: $(tail -n 1 "$T.long.cold")"
    f=$(final "$T.long.cold")
    tcold=$(p35_field "$f" ttft_s)
    echo "warm turns (TTFT per computed token: flat means no cliff as the context grows):"
    awk '{ printf "  turn %2d: prompt %6d, computed %5d, cached %6d, TTFT %8.3fs, %5.2f ms/token\n",
           $1, $2, $2 - $3, $3, $4, ($2 > $3 ? 1000 * $4 / ($2 - $3) : 0) }' "$T.long.rows"
    tail -n 1 "$T.long.rows" | awk -v off="$tcold" '{
        sp = $4 > 0 ? off / $4 : 0; ceil = $2 > $3 ? $2 / ($2 - $3) : 0
        printf "last turn: %d tokens, %d computed: TTFT %.3fs cold, %.3fs warm: %.1fx (ceiling %.1fx, %.0f%% of it; issue target >= %dx)\n",
            $2, $2 - $3, off, $4, sp, ceil, (ceil > 0 ? 100 * sp / ceil : 0), ($2 >= 100000 ? 60 : 25) }'
    if [ "$(gen_ids "$T.long.cold")" = "$(gen_ids "$T.long.$turn")" ]; then
        echo "answer ids with the cache on and off: identical"
    else
        echo "answer ids with the cache on and off: DIFFER"
    fi
    P35_NAMES="c0 c1 d0 d1 coc cod"
    p35_stop
    P35_NAMES=""
}
for L in $LONG; do
    if [ "$L" -gt 0 ]; then long_case "$L"; fi
done
