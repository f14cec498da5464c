#!/bin/sh
# Locally typical sampling end to end: --typical 0.5 on qwen35-run, on
# qwen35-client through a 2-stage pipeline and "typical_p": 0.5 in an HTTP
# completion through qwen35-http give the same seeded ids, so the value
# reached the last stage's sampler from each; and it changes the ids (else
# the check proves nothing), while --typical 1 (off) changes none.
set -eu
P35_ME=it_pipeline_typical
. "$(dirname "$0")/../client/pipeline.sh"
M=${QWEN35_GOLDEN:?}/models/tiny-Q8_0.gguf TOK=$QWEN35_GOLDEN/tokens64.txt N=24
p35_init
for b in qwen35-run qwen35-http; do [ -x "$BIN/$b" ] || p35_die "$BIN/$b missing"; done
for c in curl jq; do command -v $c >/dev/null || p35_die "$c missing (make deps installs it)"; done

# every truncation but typical off, so typical alone decides
BASE="--temp 1 --top-k 0 --top-p 1 --min-p 0 --seed 5"
run_ref() {   # qwen35-run's ids for FLAGS…
    # shellcheck disable=SC2086
    "$BIN/qwen35-run" -m "$M" --tokens "$TOK" -n $N $BASE "$@" 2>/dev/null | tr -s ' \n' ' ' | sed 's/ $//;s/^ //'
}

p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 2 --max-ctx 256
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 2 --max-ctx 256
p35_coord "$M" s0 s1 -- --max-ctx 256 --max-seqs 2
p35_wait_ready 30

plain=$(run_ref)
off=$(run_ref --typical 1)
typ=$(run_ref --typical 0.5)
[ -n "$plain" ] || p35_die "qwen35-run gave no ids"
[ "$off" = "$plain" ] || p35_fail "--typical 1 changed the ids: [$off] vs [$plain]"
[ "$typ" != "$plain" ] || p35_fail "--typical 0.5: same ids as without it: the check proves nothing"

# shellcheck disable=SC2086
got=$(p35_client --prompt-ids "$TOK" -n $N --ignore-eos --ids $BASE --typical 0.5) ||
    p35_fail "qwen35-client --typical 0.5: request failed"
[ "$got" = "$typ" ] || p35_fail "qwen35-client --typical 0.5: pipeline ids [$got], qwen35-run [$typ]"
echo "ok --typical 0.5: qwen35-client through the pipeline = qwen35-run, and differs from off"

KEY=sk-test-$$
printf '%s\n' "$KEY" >"$P35_RUN/keys"
: >"$P35_RUN/http.log"
"$BIN/qwen35-http" --listen 127.0.0.1:0 --coordinator "$P35_EP" --api-key-file "$P35_RUN/keys" \
    >>"$P35_RUN/http.log" 2>&1 &
P35_PID_http=$!
P35_NAMES="$P35_NAMES http"
p35_wait_file "$P35_RUN/http.log" "the coordinator answers" 20 || p35_die "qwen35-http did not come up"
PORT=$(sed -n 's|.*serving http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$P35_RUN/http.log" | head -n 1)
ids=$(tr -s ' \n' ',' <"$TOK" | sed 's/,$//;s/^,//')
http_ids() {   # the ids of a completion with typical_p $1
    curl -sS -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        "http://127.0.0.1:$PORT/v1/completions" \
        -d "{\"prompt\":[$ids],\"max_tokens\":$N,\"ignore_eos\":true,\"return_token_ids\":true,
             \"temperature\":1,\"top_k\":0,\"top_p\":1,\"min_p\":0,\"seed\":5,\"typical_p\":$1}" |
        jq -r '.choices[0].token_ids | map(tostring) | join(" ")'
}
hgot=$(http_ids 0.5) || p35_fail "HTTP typical_p 0.5: request failed"
[ "$hgot" = "$typ" ] || p35_fail "HTTP typical_p 0.5: ids [$hgot], qwen35-run --typical 0.5 [$typ]"
hoff=$(http_ids 1) || p35_fail "HTTP typical_p 1: request failed"
[ "$hoff" = "$plain" ] || p35_fail "HTTP typical_p 1: ids [$hoff], qwen35-run [$plain]"
echo "ok HTTP typical_p 0.5 = qwen35-run --typical 0.5; typical_p 1 = off"
p35_result "typical_p reaches the last stage from the CLI, the client and HTTP"
