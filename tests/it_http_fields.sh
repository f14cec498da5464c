#!/bin/sh
# qwen35-http's OpenAI request fields and model names (issue #27 section
# 2), 2 stages + a coordinator on the golden tiny model, through the openai
# npm SDK and raw SSE (tests/http/fields.mjs): /v1/models lists general.name
# and the aliases; any model name is served and answered as general.name,
# strict-model-name gives 404 model_not_found; logit_bias bans (-100) and
# forces (+100) tokens end to end, an id past the vocabulary is a 400 from
# the coordinator; stream_options.include_usage's last chunk; parallel_tool_calls,
# n and best_of.
set -eu
. "$(dirname "$0")/lib.sh"
need node
setup qwen35-http
npm_clients
READY_S=30 pipe2 2 4096 --max-ctx 4096 --max-seqs 2
http_front strict --alias qwen-small --alias chat --strict-model-name
STRICT_U=$U
printf '[http]\nalias = qwen-small\nalias = chat\nstrict-model-name = no\n' >"$P35_RUN/http.conf"
http_front http --config "$P35_RUN/http.conf"
grep -q 'the coordinator answers: tiny-Q8_0.gguf (oracle-tiny-s1)' "$P35_RUN/http.log" ||
    fail "the start line does not name general.name: $(grep 'coordinator answers' "$P35_RUN/http.log")"
export Q35_URL=$U/v1 Q35_STRICT_URL=$STRICT_U/v1 Q35_CLIENT=$BIN/qwen35-client Q35_EP=$P35_EP
node "$NPM/fields.mjs" || fail "the request field checks failed"
"$BIN/qwen35-http" --help | grep -q -- 'strict-model-name' || fail "--help does not list --strict-model-name"
"$BIN/qwen35-http" --help | grep -q -- '--alias NAME' || fail "--help does not list --alias"
ok "model names, logit_bias, include_usage, parallel_tool_calls, n"
