#!/bin/sh
# Output toward a slow reader is bounded in bytes per request
# (max-unread-mb; clients acknowledge what they read, ClientRequest.ack).
# 2 stages, tiny Q8_0 (a logits row: 512 floats, 2 KiB), max-unread-mb 1:
# - a client asks for the logits of every position (~2000 rows, ~4 MiB)
#   and reads nothing for 8 s: the request ends with RESOURCE_EXHAUSTED
#   "output not read" once about 1 MiB is unread, the coordinator logs it,
#   its slot is free, and the client sees the rows sent before the error
# - the same request read as it comes: every row, 4x the budget, no error
# - a text stream read as it comes, far past the budget in total: complete
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-test-client
T=$P35_RUN/t
ids64 "$T.p64"
pipe2 2 2048 --max-seqs 2 --max-ctx 2048 --max-unread-mb 1

# not read: cancelled past the budget
rc=0
timeout 120 "$TC" --endpoint "$P35_EP" --prompt-ids "$T.p64" -n 0 --logits --pause-ms 8000 \
    --timeout 60000 >"$T.slow" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "slow reader: exit $rc, expected 1 ($(tail -n 1 "$T.slow"))"
grep -q "request 0: error RESOURCE_EXHAUSTED: output not read: 1.0 MiB sent to the client and not read (max-unread-mb 1)" "$T.slow" ||
    fail "slow reader: no clear error: $(tail -n 1 "$T.slow")"
rows=$(sed -n 's/.*, \([0-9]*\) logit rows).*/\1/p' "$T.slow")
[ -n "$rows" ] && [ "$rows" -ge 256 ] && [ "$rows" -le 1024 ] ||
    fail "slow reader: $rows logit rows before the error, expected about 1 MiB of them (512)"
grep -q "output not read" "$P35_RUN/coord.log" || fail "slow reader: the coordinator did not log it"
echo "slow reader: $(tail -n 1 "$T.slow" | cut -c1-220)"
st=$(p35_client --status --json --timeout 5000)
[ "$(p35_field "$st" slots_used)" = 0 ] || fail "slow reader: its slot is still used: $st"

# read as it comes: every row, past the budget in total
rc=0
timeout 120 "$TC" --endpoint "$P35_EP" --prompt-ids "$T.p64" -n 0 --logits --timeout 60000 \
    >"$T.fast" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "reader: exit $rc ($(tail -n 1 "$T.fast"))"
grep -q "request 0: length, 1984 tokens, 2047 logit rows" "$T.fast" ||
    fail "reader: not every row: $(tail -n 1 "$T.fast")"
echo "reader: $(tail -n 1 "$T.fast") (4.0 MiB of logits, budget 1 MiB)"

# text, read as it comes: 1984 tokens of ~100-byte events, far past 1 MiB
got=$(p35_client --prompt-ids "$T.p64" -n 0 --ignore-eos --json --timeout 60000 | grep -c '"event":"piece"') ||
    fail "text reader failed"
[ "$got" -ge 1984 ] || fail "text reader: $got pieces, expected 1984"
ok "output unread past max-unread-mb ends the request; readers are never cut off"
