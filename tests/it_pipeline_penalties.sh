#!/bin/sh
# Presence and frequency penalties (with their window) through a 2-stage
# pipeline give exactly what qwen35-run gives with the same flags, greedy
# and seeded; and they change the output (else the check proves nothing).
set -eu
. "$(dirname "$0")/lib.sh"
TOK=$G/tokens64.txt
N=24
setup qwen35-run

run_ref() {   # qwen35-run's ids for FLAGS…
    "$BIN/qwen35-run" -m "$M" --tokens "$TOK" -n $N "$@" 2>/dev/null | tr -s ' \n' ' ' | sed 's/ $//;s/^ //'
}

p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 2 --max-ctx 256
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
p35_coord "$M" s0 s1 -- --max-ctx 256 --max-seqs 2
p35_wait_ready 30

plain=$(run_ref)
for flags in "--presence-penalty -3 --frequency-penalty -1 --penalty-window 32" \
             "--frequency-penalty 2 --presence-penalty -0.5" \
             "--temp 0.9 --top-k 50 --top-p 0.9 --min-p 0.05 --seed 77" \
             "--presence-penalty -1 --frequency-penalty 0.5 --temp 0.9 --top-k 50 --top-p 0.9 --min-p 0.05 --seed 77"; do
    # shellcheck disable=SC2086
    ref=$(run_ref $flags)
    # shellcheck disable=SC2086
    got=$(p35_client --prompt-ids "$TOK" -n $N --ignore-eos --ids $flags) ||
        { fail "[$flags]: request failed"; continue; }
    if [ "$got" != "$ref" ]; then
        fail "[$flags]: pipeline ids [$got], qwen35-run [$ref]"
        continue
    fi
    case "$flags" in *penalty*--temp*|--temp*) ;; *)
        [ "$ref" != "$plain" ] || fail "[$flags]: same ids as without penalties: the check proves nothing" ;;
    esac
    echo "[$flags]: equal to qwen35-run"
done
ok "penalties equal"
