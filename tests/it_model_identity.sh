#!/bin/sh
# Model identity covers the tensor data: two generated models that differ
# only in their weights (seeds 1 and 2, the name in the header made equal:
# same size, same header hash) are told apart by the data hash.
# - at start-up: a stage serving the other weights is refused at the
#   coordinator's handshake, naming both identities, exit 78
# - running: a stage that comes back with the other weights is not routed
#   to (the request waits); back with the right ones, the request completes
#   with the undisturbed run's tokens
set -eu
. "$(dirname "$0")/lib.sh"
setup
MK="$BIN/qwen35-mkmodel"
A=$P35_RUN/a.gguf
B=$P35_RUN/b.gguf
"$MK" -o "$A" --seed 1 --types q8_0 >/dev/null
"$MK" -o "$P35_RUN/b2.gguf" --seed 2 --types q8_0 >/dev/null
perl -pe 's/qwen35-mkmodel tiny seed 2/qwen35-mkmodel tiny seed 1/' "$P35_RUN/b2.gguf" >"$B"
[ "$(wc -c <"$A")" -eq "$(wc -c <"$B")" ] || fail "the two models differ in size"

p35_stage s0 "$A" 0:4 --threads 1 --max-seqs 2 --max-ctx 256
p35_stage s1 "$B" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
rc=0
timeout 90 "$BIN/qwen35-coordinator" --model "$A" --listen "$P35_EP" \
    --stage "ipc://$P35_RUN/s0.sock 0:4" --stage "ipc://$P35_RUN/s1.sock 4:8" \
    --max-seqs 2 --max-ctx 256 >"$P35_RUN/c1.log" 2>&1 || rc=$?
[ $rc -eq 78 ] || fail "a stage with other weights at start-up: exit $rc, expected 78"
line=$(grep "serves other weights behind the same header" "$P35_RUN/c1.log" | head -n 1) ||
    fail "no refusal naming other weights: $(tail -n 2 "$P35_RUN/c1.log")"
echo "start-up: exit $rc: $(echo "$line" | cut -c1-400)"
# both identities named: same header hash twice, two different data hashes
hh=$(echo "$line" | grep -o 'header hash [0-9a-f]*' | sort -u | wc -l)
dh=$(echo "$line" | grep -o 'data hash [0-9a-f]*' | sort -u | wc -l)
[ "$hh" -eq 1 ] && [ "$dh" -eq 2 ] ||
    fail "the message should name one header hash and two data hashes: $line"

# the right weights: the chain serves; the reference run
p35_kill s1 TERM
p35_stage s1 "$A" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
p35_coord "$A" s0 s1 -- --max-seqs 2 --max-ctx 256 --replay-wait-ms 60000
p35_wait_ready 60
REF=$(p35_client --prompt "the model identity" -n 24 --ignore-eos --ids --timeout 60000) ||
    fail "reference request failed"

# s1 comes back with other weights: not routed to
p35_kill s1 KILL
p35_stage s1 "$B" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
wait_for "$P35_RUN/coord.log" "other weights behind the same header" 60 ||
    fail "the restarted stage with other weights was not refused: $(tail -n 2 "$P35_RUN/coord.log")"
p35_bg_client "$P35_RUN/r.out" --prompt "the model identity" -n 24 --ignore-eos --ids --timeout 120000
pc=$P35_LAST
sleep 2
st=$(p35_client --status --json --timeout 5000) || st=""
printf '%s' "$st" | grep -q '"up":false' || fail "the stage with other weights shows up: $st"
grep -q . "$P35_RUN/r.out" && fail "tokens came from a chain with other weights: $(cat "$P35_RUN/r.out")"
# back with the right weights: the waiting request completes, identical
p35_kill s1 KILL
p35_stage s1 "$A" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
rc=0
wait $pc || rc=$?
[ $rc -eq 0 ] || fail "the request after the right weights came back: exit $rc ($(cat "$P35_RUN/r.out.err"))"
got=$(cat "$P35_RUN/r.out")
[ "$got" = "$REF" ] || fail "tokens [$got] != the undisturbed run [$REF]"
# one byte flipped where the old sampled hash never read (1500 bytes into
# the largest tensor: between its first two 1 KiB windows): the running
# stage that comes back with it is not routed to either
C=$P35_RUN/c.gguf
cp "$A" "$C"
at=$(perl "$(dirname "$0")/gguf_gap.pl" "$C") || fail "gguf_gap.pl failed"
b=$(od -An -tu1 -j "$at" -N1 "$C" | tr -d ' ')
printf "$(printf '\\%03o' $(( b ^ 1 )))" | dd of="$C" bs=1 seek="$at" conv=notrunc 2>/dev/null
cmp -s "$A" "$C" && fail "the byte flip did not change the copy"
n0=$(grep -c "other weights behind the same header" "$P35_RUN/coord.log" || true)
p35_kill s1 KILL
p35_stage s1 "$C" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
i=0
while [ "$(grep -c "other weights behind the same header" "$P35_RUN/coord.log" || true)" -le "$n0" ]; do
    i=$((i + 1))
    if [ $i -gt "$(p35_scale 600)" ]; then
        fail "a stage with one byte changed (offset $at) was not refused: $(tail -n 2 "$P35_RUN/coord.log")"
        break
    fi
    sleep 0.1
done
st=$(p35_client --status --json --timeout 5000) || st=""
printf '%s' "$st" | grep -q '"up":false' || fail "the stage with one byte changed shows up: $st"
echo "one byte changed at offset $at (outside the old sampled windows): refused: $(grep "other weights" "$P35_RUN/coord.log" | tail -n 1 | grep -o 'data hash [0-9a-f]*' | tr '\n' ' ')"
grep -h "model identity: data hash" "$P35_RUN/s1.log" | tail -n 2 | sed 's/^[^:]*: [A-Z]*: /s1: /'
ok "a stage with other tensor data behind the same header is refused, naming both identities"
