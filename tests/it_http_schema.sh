#!/bin/sh
# Structured output through qwen35-http on the golden tiny model (random
# weights), 2 stages + a coordinator: ~50 JSON Schemas as response_format
# (greedy and seeded, streamed or not, thinking on and off), each answer
# parsed and validated with ajv; unsupported keywords refused with 400s
# naming keyword and path; json_object; the openai SDK's parse() with
# zodResponseFormat; LangChain's withStructuredOutput; tool_choice
# "required" and named, the tool_calls' arguments validated against the
# tools' parameters (tests/http/schema.mjs).
set -eu
. "$(dirname "$0")/lib.sh"
need node
setup qwen35-http
npm_clients
READY_S=30 pipe2 2 4096 --max-ctx 4096 --max-seqs 2
http_front http
export Q35_URL=$U/v1
node "$NPM/schema.mjs" || fail "the structured output checks failed"
ok "structured output: schemas, refusals, SDK parse, LangChain, forced tool calls"
