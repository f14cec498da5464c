#!/bin/sh
# bench_peer.sh PEER MODEL QWEN35_BENCH [ROUNDS] [THREADS]
# qwen35 against the reference engine's llama-bench on the same file,
# interleaved (peer, qwen35, peer, qwen35 ...) for ROUNDS rounds (default
# 3): decode of 64 tokens at 1 and THREADS (default 2) threads, prefill of
# 64 and of 512 tokens at THREADS; qwen35's exact path in each, and for
# the prefill of 512 its --activations q8 path too (the peer's scheme;
# the peer runs the same case once per round). Prints every round, then min and median per
# engine and the median of the per-round ratios qwen35 / peer, with the
# read bandwidth qwen35-bench measured in each of its runs. The peer is
# never downloaded or built here: build it outside the tree.
set -u
PEER=${1:?usage: bench_peer.sh PEER MODEL QWEN35_BENCH [ROUNDS] [THREADS]}
MODEL=${2:?model}
OURS=${3:?qwen35-bench}
ROUNDS=${4:-3}
T=${5:-2}
[ -x "$PEER" ] || { echo "bench-peer: $PEER is not an executable llama-bench" >&2; exit 2; }
[ -r "$MODEL" ] || { echo "bench-peer: $MODEL: not readable" >&2; exit 2; }
[ "$ROUNDS" -ge 1 ] 2>/dev/null || { echo "bench-peer: ROUNDS '$ROUNDS' must be >= 1" >&2; exit 2; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# peer tok/s: llama-bench -o csv, the avg_ts column
peer() {   # what threads
    case $1 in
    decode)     set -- "$2" -p 0 -n 64 ;;
    prefill)    set -- "$2" -p 64 -n 0 ;;
    prefill512) set -- "$2" -p 512 -n 0 ;;
    esac
    t=$1; shift
    "$PEER" -m "$MODEL" "$@" -t "$t" -r 1 -o csv 2>"$tmp/peer.err" | awk -F, '
        NR == 1 { for (i = 1; i <= NF; i++) { h = $i; gsub(/"/, "", h); if (h == "avg_ts") c = i } next }
        c { v = $c; gsub(/"/, "", v); print v; exit }'
}
# qwen35 tok/s and bandwidth: the RESULT line of qwen35-bench --only
ours() {   # what threads activations
    "$OURS" -m "$MODEL" --only "$1" --threads "$2" --tokens 32 --activations "$3" 2>"$tmp/ours.err" |
        awk '$1 == "RESULT" { print $5, $6; exit }'
}

# what:threads:activations
cases="decode:1:exact decode:$T:exact prefill:$T:exact prefill512:$T:exact prefill512:$T:q8"
[ "$T" = 1 ] && cases="decode:1:exact prefill:1:exact prefill512:1:exact prefill512:1:q8"
echo "bench-peer: $MODEL, $ROUNDS interleaved rounds; peer $PEER"
for r in $(seq 1 "$ROUNDS"); do
    for c in $cases; do
        what=${c%%:*} t=${c#*:} a=${c##*:}
        t=${t%%:*}
        p=$(peer "$what" "$t")
        [ -n "$p" ] || { echo "bench-peer: the peer gave no figure for $what, $t threads:" >&2; tail -5 "$tmp/peer.err" >&2; exit 1; }
        set -- $(ours "$what" "$t" "$a")
        [ $# -eq 2 ] || { echo "bench-peer: qwen35-bench gave no figure for $what, $t threads, $a:" >&2; tail -5 "$tmp/ours.err" >&2; exit 1; }
        printf 'round %d %-10s threads %d: peer %8.2f tok/s, qwen35 %-5s %8.2f tok/s (%.2fx; read bandwidth %s GB/s)\n' \
            "$r" "$what" "$t" "$p" "$a" "$1" "$(echo "$1 $p" | awk '{ printf "%.4f", $1 / $2 }')" "$2"
        echo "$c $p $1" >>"$tmp/all"
    done
done
echo "summary (min / median over $ROUNDS rounds; ratio = median of the per-round qwen35/peer):"
for c in $cases; do
    what=${c%%:*} t=${c#*:} a=${c##*:}
    t=${t%%:*}
    awk -v c="$c" '$1 == c { print $2 }' "$tmp/all" | sort -g >"$tmp/p"
    awk -v c="$c" '$1 == c { print $3 }' "$tmp/all" | sort -g >"$tmp/o"
    awk -v c="$c" '$1 == c { print $3 / $2 }' "$tmp/all" | sort -g >"$tmp/r"
    med() { awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }' "$1"; }
    printf '%-10s threads %d: peer %.2f / %.2f tok/s, qwen35 %-5s %.2f / %.2f tok/s, qwen35/peer %.2fx\n' \
        "$what" "$t" "$(head -1 "$tmp/p")" "$(med "$tmp/p")" "$a" "$(head -1 "$tmp/o")" "$(med "$tmp/o")" "$(med "$tmp/r")"
done
