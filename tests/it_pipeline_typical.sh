#!/bin/sh
# Locally typical sampling end to end: --typical 0.5 on qwen35-run, on
# qwen35-client through a 2-stage pipeline and "typical_p": 0.5 in an HTTP
# completion through qwen35-http give the same seeded ids, so the value
# reached the last stage's sampler from each; and it changes the ids (else
# the check proves nothing), while --typical 1 (off) changes none.
set -eu
. "$(dirname "$0")/lib.sh"
TOK=$G/tokens64.txt N=24
setup qwen35-run qwen35-http
need curl jq

# every truncation but typical off, so typical alone decides
BASE="--temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 5"
run_ref() {   # qwen35-run's ids for FLAGS…
    # shellcheck disable=SC2086
    "$BIN/qwen35-run" -m "$M" --tokens "$TOK" -n $N $BASE "$@" 2>/dev/null | tr -s ' \n' ' ' | sed 's/ $//;s/^ //'
}

pipe2 2 256 --max-ctx 256 --max-seqs 2

plain=$(run_ref)
off=$(run_ref --typical 1)
typ=$(run_ref --typical 0.5)
[ -n "$plain" ] || fail "qwen35-run gave no ids"
[ "$off" = "$plain" ] || fail "--typical 1 changed the ids: [$off] vs [$plain]"
[ "$typ" != "$plain" ] || fail "--typical 0.5: same ids as without it: the check proves nothing"

# shellcheck disable=SC2086
got=$(p35_client --prompt-ids "$TOK" -n $N --ignore-eos --ids $BASE --typical 0.5) ||
    fail "qwen35-client --typical 0.5: request failed"
[ "$got" = "$typ" ] || fail "qwen35-client --typical 0.5: pipeline ids [$got], qwen35-run [$typ]"
ok "--typical 0.5: qwen35-client through the pipeline = qwen35-run, and differs from off"

KEY=sk-test-$$
printf '%s\n' "$KEY" >"$P35_RUN/keys"
http_front http --api-key-file "$P35_RUN/keys"
ids=$(tr -s ' \n' ',' <"$TOK" | sed 's/,$//;s/^,//')
http_ids() {   # the ids of a completion with typical_p $1
    curl -sS -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        "$U/v1/completions" \
        -d "{\"prompt\":[$ids],\"max_tokens\":$N,\"ignore_eos\":true,\"return_token_ids\":true,
             \"temperature\":1,\"top_k\":0,\"top_p\":1,\"min_p\":0,\"seed\":5,\"typical_p\":$1}" |
        jq -r '.choices[0].token_ids | map(tostring) | join(" ")'
}
hgot=$(http_ids 0.5) || fail "HTTP typical_p 0.5: request failed"
[ "$hgot" = "$typ" ] || fail "HTTP typical_p 0.5: ids [$hgot], qwen35-run --typical 0.5 [$typ]"
hoff=$(http_ids 1) || fail "HTTP typical_p 1: request failed"
[ "$hoff" = "$plain" ] || fail "HTTP typical_p 1: ids [$hoff], qwen35-run [$plain]"
ok "HTTP typical_p 0.5 = qwen35-run --typical 0.5; typical_p 1 = off"
ok "typical_p reaches the last stage from the CLI, the client and HTTP"
