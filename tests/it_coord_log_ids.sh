#!/bin/sh
# The coordinator's log names each request by a number of its own beside
# the client's request_id: every qwen35-client process counts its ids from
# 1, so two one-shot clients are two requests "1", and the log must still
# tell them apart ("request 1 (id 1): ...", "request 2 (id 1): ...").
set -eu
. "$(dirname "$0")/lib.sh"
setup
pipe2 2 512 --max-seqs 2 --max-ctx 512
for i in 1 2; do
    p35_client -n 4 --ignore-eos hi >"$T/out$i" 2>"$T/err$i" || fail "client $i: $(cat "$T/err$i")"
done
finished() { [ "$(grep -c 'completion tokens' "$P35_RUN/coord.log")" -ge 2 ]; }
wait_until 10 finished ||
    fail "the coordinator logged $(grep -c 'completion tokens' "$P35_RUN/coord.log") finished requests, want 2"
grep 'completion tokens' "$P35_RUN/coord.log" | sed -n 's/.*\(request [^:]*\): .*/\1/p' >"$T/labels"
[ "$(wc -l <"$T/labels")" -eq 2 ] && [ "$(sort -u "$T/labels" | wc -l)" -eq 2 ] ||
    fail "two requests, labels: $(tr '\n' ',' <"$T/labels")"
grep -qx 'request 1 (id 1)' "$T/labels" && grep -qx 'request 2 (id 1)' "$T/labels" ||
    fail "want 'request 1 (id 1)' and 'request 2 (id 1)': $(tr '\n' ',' <"$T/labels")"
ok "two one-shot clients: $(tr '\n' ',' <"$T/labels" | sed 's/,$//')"
