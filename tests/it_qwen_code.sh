#!/bin/sh
# Qwen Code (@qwen-code/qwen-code, the Qwen team's agent CLI, pinned in
# tests/http/package-lock.json) runs non-interactively against qwen35-http
# on 2 stages of a generated model whose context holds its prompt (tiny
# sizes, 4 layers, the real Qwen3 vocabulary, context 16384): its first
# call sends ~13K tokens of system prompt and tool definitions (~8K with
# --bare, which reads no settings file: not used here, the settings set the
# timeouts). It must exit 0 with an answer, and no request may be sent
# twice. Qwen Code's OpenAI SDK gives up on a request whose response
# headers have not come within its timeout and sends it again (maxRetries
# 3), and it gives up on a stream without a chunk for its idle timeout: a
# long prefill did both when qwen35-http held the headers until the first
# token. Here both are cut under the prefill's time (QC_TIMEOUT_S, default
# 3 s, QC_IDLE_S, default 12 s, both scaled), so the test fails unless the
# headers come at once and keep-alive chunks follow.
# Before it, curl -N times a stream on a long prompt: its headers and
# role chunk come at once, keep-alive chunks while it prefills.
# Prints the prompt size, the TTFT of each request, the prefill rate, the
# run's time and the load.
set -eu
. "$(dirname "$0")/lib.sh"
need node curl
setup qwen35-http qwen35-mkmodel
npm_clients
QC=$NPM/node_modules/@qwen-code/qwen-code/cli-entry.js
[ -f "$QC" ] || skip "Qwen Code is not installed in $NPM (tests/http/npm-setup.sh)"
VOCAB=$G/tokenizer/qwen3-vocab.gguf
[ -f "$VOCAB" ] || skip "no $VOCAB"
CTX=16384

# 4 layers (one attention layer) of 256 wide: 13K tokens prefill in under
# a minute on a loaded core; a real tokenizer, so that text is as many
# tokens as a real model's
MODEL=$T/qc.gguf
"$BIN/qwen35-mkmodel" --preset tiny --layers 4 --ctx $CTX --types q8_0 --vocab-from "$VOCAB" \
    -o "$MODEL" >"$T/mkmodel.log" 2>&1 || fail "qwen35-mkmodel: $(tail -n 2 "$T/mkmodel.log")"
p35_stage s0 "$MODEL" 0:2 --threads 1 --max-seqs 1 --max-ctx $CTX
p35_stage s1 "$MODEL" 2:4 --threads 1 --max-seqs 1 --max-ctx $CTX
p35_coord "$MODEL" s0 s1 -- --max-ctx $CTX --max-seqs 1
p35_wait_ready 60
KEY=sk-qc-$$
printf '%s\n' "$KEY" >"$T/keys"
http_front http --api-key-file "$T/keys"

# curl -N: a stream's headers, its role chunk and then keep-alive chunks
# (an empty delta) come while a long prompt (~10K tokens of words, none
# cached) prefills, long before its first token
awk 'BEGIN { srand(7); n = split("the of and to in a is that for it as was with be by on not he this " \
    "are or his from at which but have an they you were her she there one all we can their has been", w, " ")
    for (i = 0; i < 10000; i++) printf "%s ", w[int(rand() * n) + 1] }' >"$T/words"
printf '{"model":"qc.gguf","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"%s"}]}' \
    "$(cat "$T/words")" >"$T/long.json"
curl -sN -w '%{time_starttransfer} %{time_total}\n' -o "$T/long.sse" -H "Authorization: Bearer $KEY" \
    -H 'Content-Type: application/json' --data-binary @"$T/long.json" "$U/v1/chat/completions" >"$T/curl.t" ||
    fail "curl -N on the long prompt failed"
read -r first total <"$T/curl.t"
c_ttft=$(sed -n 's/.*request 1 (.*ttft \([0-9.]*\) s.*/\1/p' "$T/coord.log")
kas=$(grep -c '"delta":{},' "$T/long.sse" || true)
echo "curl -N, $(sed -n 's/.*request 1 (.*: [a-z]*, \([0-9]*\) prompt.*/\1/p' "$T/coord.log") prompt tokens:" \
     "first bytes after $first s, the first token after $c_ttft s, done after $total s, $kas keep-alive chunks"
head -n 1 "$T/long.sse" | grep -q '"delta":{"role":"assistant","content":""}' ||
    fail "the stream does not open with the role chunk: $(head -c 300 "$T/long.sse")"
grep -q '^data: \[DONE\]' "$T/long.sse" || fail "no [DONE] in the long stream: $(tail -c 300 "$T/long.sse")"
awk -v f="$first" -v t="$c_ttft" -v w="$(p35_scale 1)" 'BEGIN { exit !(t > 2.5 && f < 1 + w && f < t / 2) }' ||
    fail "first bytes after $first s, the first token after $c_ttft s: not at once (or the prompt was too quick)"
awk -v t="$c_ttft" -v n="$kas" 'BEGIN { exit !(t < 11 || n >= 1) }' ||
    fail "no keep-alive chunk in a $c_ttft s wait for the first token"

# Its settings in a home of its own; the workspace an empty folder. Plan
# mode runs no tool that writes or executes; max_tokens bounds each
# answer and two session turns the agent loop (random weights answer
# nonsense, possibly tool calls). Thinking off: an answer of reasoning
# only is one Qwen Code takes for empty and asks again. No background
# memory agents (their requests would only lengthen the run).
TIMEOUT_MS=$(awk -v s="$(p35_scale "${QC_TIMEOUT_S:-3}")" 'BEGIN { printf "%d", s * 1000 }')
IDLE_MS=$(awk -v s="$(p35_scale "${QC_IDLE_S:-12}")" 'BEGIN { printf "%d", s * 1000 }')
mkdir -p "$T/home/.qwen" "$T/work"
cat >"$T/home/.qwen/settings.json" <<EOF
{
  "security": { "auth": { "selectedType": "openai" } },
  "model": { "generationConfig": { "timeout": $TIMEOUT_MS, "maxRetries": 3,
                                    "streamIdleTimeoutMs": $IDLE_MS,
                                    "samplingParams": { "max_tokens": 24, "temperature": 0 },
                                    "extra_body": { "chat_template_kwargs": { "enable_thinking": false } } } },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "general": { "disableAutoUpdate": true, "disableUpdateNag": true },
  "tools": { "useRipgrep": false },
  "memory": { "enableManagedAutoMemory": false, "enableManagedAutoDream": false }
}
EOF
load0=$(cut -d' ' -f1 /proc/loadavg)
T0=$(now)
rc=0
(cd "$T/work" && HOME=$T/home OPENAI_BASE_URL=$U/v1 OPENAI_API_KEY=$KEY OPENAI_MODEL=qc.gguf \
    timeout -k 5 "$(p35_scale 300)" node "$QC" --auth-type openai -m qc.gguf --approval-mode plan \
    --max-session-turns 2 --output-format json "Say hello in one word." \
    >"$T/qc.out" 2>"$T/qc.err") || rc=$?
took=$(since "$T0")
load1=$(cut -d' ' -f1 /proc/loadavg)
[ "$rc" -eq 0 ] || fail "Qwen Code exited $rc after $took s: $(tail -c 600 "$T/qc.err") $(tail -c 600 "$T/qc.out")"
[ -s "$T/qc.out" ] || fail "Qwen Code printed no answer: $(tail -c 600 "$T/qc.err")"

# The coordinator's line per request: "request R: FINISH, N prompt (C
# cached) + K completion tokens, ttft T s, ..."
grep 'request .*prompt (' "$T/coord.log" | grep -v 'request 1 (' >"$T/requests" ||
    fail "no request of Qwen Code in the coordinator's log"
n=$(wc -l <"$T/requests")
first=$(sed -n 's/.* \([0-9]*\) prompt (\([0-9]*\) cached).*ttft \([0-9.]*\) s.*/\1 \2 \3/p' "$T/requests" | head -n 1)
set -- $first
prompt=$1 cached=$2 ttft=$3
rate=$(awk -v p="$prompt" -v c="$cached" -v t="$ttft" 'BEGIN { printf "%.0f", (t > 0 ? (p - c) / t : 0) }')
echo "Qwen Code: $n request(s) in $took s (load $load0 -> $load1); the first: $prompt prompt tokens" \
     "($cached cached), ttft $ttft s ($rate tokens/s prefill)"
sed 's/.*request \([^:]*\): \([a-z_]*\), \([0-9]*\) prompt (\([0-9]*\) cached) + \([0-9]*\) completion tokens, ttft \([0-9.]*\) s.*/  \1: \2, \3 prompt (\4 cached) + \5 completion, ttft \6 s/' \
    "$T/requests"
[ "$prompt" -ge 6000 ] || fail "the first prompt has $prompt tokens: not Qwen Code's long one"
! grep -q 'cancelled' "$T/requests" "$T/http.log" ||
    fail "a request was cancelled (the client gave up): $(grep cancelled "$T/requests" "$T/http.log" | head -n 3)"
# a retry sends the same prompt again: two requests of one prompt size
dup=$(sed -n 's/.* \([0-9]*\) prompt (.*/\1/p' "$T/requests" | sort | uniq -d | head -n 1)
[ -z "$dup" ] || fail "two requests of $dup prompt tokens (a retry): $(cat "$T/requests")"
ok "Qwen Code answered in $took s: $n request(s), no retry, first prompt $prompt tokens, ttft $ttft s"
