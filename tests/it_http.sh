#!/bin/sh
# qwen35-http in front of 2 stages + a coordinator on the golden tiny model,
# tried with real clients on loopback: the official openai npm SDK (same
# ids, text and usage as qwen35-client; models.list; 401, 400, 404, 429;
# aborted streams free their slots), curl -N (SSE chunks arrive one by one,
# gaps measured), promtool check metrics, 50+ malformed requests and stalled
# clients, the chat page in headless chromium (screenshots in
# $QWEN35_BUILD/http-chat.png and, 390 px wide, http-chat-390.png), and a
# drain on SIGTERM.
set -eu
. "$(dirname "$0")/lib.sh"
need node curl promtool chromium
setup qwen35-http
npm_clients
# one slot and a queue of one: a third request is refused (429)
READY_S=30 pipe2 2 4096 --max-ctx 4096 --max-seqs 1 --max-queue 1
KEY=sk-test-$$
printf '# test keys\n\n%s\n' "$KEY" >"$P35_RUN/keys"
MAX_BODY=1048576
REQ_TIMEOUT=$(p35_scale 2)   # a loaded machine answers slower (QWEN35_TIME_SCALE)
http_front http --api-key-file "$P35_RUN/keys" --max-body $MAX_BODY --request-timeout-s $REQ_TIMEOUT \
    --drain-timeout-s "$(p35_scale 10)" --cors-origin http://page.test
AUTH="Authorization: Bearer $KEY"

export Q35_URL=$U/v1 Q35_BASE=$U Q35_KEY=$KEY Q35_CLIENT=$BIN/qwen35-client Q35_EP=$P35_EP
export Q35_MAX_BODY=$MAX_BODY Q35_REQ_TIMEOUT_S=$REQ_TIMEOUT Q35_SHOT=$(cd "$BUILD" && pwd)/http-chat.png
node "$NPM/sdk.mjs" || fail "the openai SDK checks failed"

# curl -N: one chunk per token, as they are generated (curl's trace clock)
N=24
curl -sN --trace-ascii "$P35_RUN/trace" --trace-time -H "$AUTH" "$U/v1/completions" \
    -d "{\"prompt\":[1,2,3],\"max_tokens\":$N,\"ignore_eos\":true,\"temperature\":0,\"stream\":true}" \
    >"$P35_RUN/sse.txt" || fail "curl -N failed"
chunks=$(grep -c '^data: {' "$P35_RUN/sse.txt" || true)
grep -q '^data: \[DONE\]' "$P35_RUN/sse.txt" || fail "no data: [DONE] in the stream"
grep '<= Recv data' "$P35_RUN/trace" | awk '{ split($1, t, ":"); printf "%.6f\n", t[1] * 3600 + t[2] * 60 + t[3] }' >"$P35_RUN/recv.txt"
recvs=$(wc -l <"$P35_RUN/recv.txt")
spread=$(awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.1f", (b - a) * 1000 }' "$P35_RUN/recv.txt")
med=$(awk 'NR > 1 { printf "%.3f\n", ($1 - p) * 1000 } { p = $1 }' "$P35_RUN/recv.txt" | sort -n |
      awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
echo "curl -N: $chunks chunks for $N tokens in $recvs reads over $spread ms (median gap $med ms)"
[ "$chunks" -ge $N ] || fail "$chunks data chunks for $N tokens"
# all at the end would be one or two reads; one read per token chunk at least 2/3 of the time
[ "$recvs" -ge $((N * 2 / 3)) ] || fail "the $N token chunks came in $recvs reads: not one at a time"
awk -v m="$med" 'BEGIN { exit !(m > 0.05) }' || fail "median gap between reads $med ms: chunks were not spread over the generation"

# CORS: the preflight and the answers name the configured origin
curl -si -X OPTIONS "$U/v1/chat/completions" -H 'Origin: http://page.test' \
    -H 'Access-Control-Request-Method: POST' >"$P35_RUN/cors.txt" || true
grep -qi '^Access-Control-Allow-Origin: http://page.test' "$P35_RUN/cors.txt" &&
    grep -qi '^Access-Control-Allow-Headers: Authorization, Content-Type' "$P35_RUN/cors.txt" &&
    head -n 1 "$P35_RUN/cors.txt" | grep -q ' 204' || fail "CORS preflight: $(head -n 8 "$P35_RUN/cors.txt")"
curl -si -H "$AUTH" "$U/v1/models" | grep -qi '^Access-Control-Allow-Origin: http://page.test' ||
    fail "no Access-Control-Allow-Origin on GET /v1/models"

# a repeated request: observed in the duration and queue-wait histograms
# (one each), and the second restores the first's prefix (the prefix cache
# is on unless --no-prefix-cache)
metric() {   # FILE NAME: the sample's value, 0 when absent
    awk -v n="$2" '$1 == n { v = $2 } END { print v + 0 }' "$1"
}
curl -s "$U/metrics" >"$P35_RUN/metrics0.txt" || fail "GET /metrics failed"
REQ='{"messages":[{"role":"user","content":"Name three colours."}],"max_tokens":8,"temperature":0}'
for i in 1 2; do
    curl -sf -H "$AUTH" "$U/v1/chat/completions" -d "$REQ" >"$P35_RUN/rep$i.json" || fail "repeated request $i failed"
done
# a scrape answers from the last status and asks for a fresh one when that
# is a second old: the coordinator's figures come a scrape or two later
hits0=$(metric "$P35_RUN/metrics0.txt" qwen35_prefix_cache_hits_total)
i=0
while :; do
    curl -s "$U/metrics" >"$P35_RUN/metrics.txt" || fail "GET /metrics failed"
    [ "$(metric "$P35_RUN/metrics.txt" qwen35_prefix_cache_hits_total)" -gt "$hits0" ] || [ $i -ge 40 ] && break
    sleep 0.25
    i=$((i + 1))
done
for m in qwen35_request_duration_seconds_count qwen35_queue_wait_seconds_count qwen35_prefix_cache_hits_total; do
    a=$(metric "$P35_RUN/metrics0.txt" $m) b=$(metric "$P35_RUN/metrics.txt" $m)
    want=2
    [ $m = qwen35_prefix_cache_hits_total ] && want=1
    [ $((b - a)) -ge $want ] || fail "$m went from $a to $b over a repeated request (want +$want)"
done
echo "repeated request: duration and queue-wait observed, prefix cache hits $(metric "$P35_RUN/metrics.txt" qwen35_prefix_cache_hits_total), stage 0 restores served $(awk '/^qwen35_stage_prefix_cache_hits_total\{stage="0"/ { print $2 }' "$P35_RUN/metrics.txt")"
# promtool on /metrics (after the requests above filled the counters)
if promtool check metrics <"$P35_RUN/metrics.txt" >"$P35_RUN/promtool.txt" 2>&1; then
    echo "promtool check metrics: ok ($(grep -c '^qwen35_' "$P35_RUN/metrics.txt") samples)"
else
    fail "promtool check metrics: $(cat "$P35_RUN/promtool.txt")"
fi
for m in qwen35_requests_total qwen35_time_to_first_token_seconds_bucket qwen35_inter_token_latency_seconds_bucket \
         qwen35_queue_depth qwen35_slots_used qwen35_stage_up qwen35_stage_busy_ratio qwen35_stage_forward_steps_total \
         qwen35_stage_rows_per_step qwen35_stage_wire_bytes_total qwen35_prompt_tokens_total \
         qwen35_request_duration_seconds_bucket qwen35_queue_wait_seconds_bucket qwen35_stage_queue_depth \
         qwen35_prefix_cache_hits_total qwen35_prefix_cache_misses_total qwen35_prefix_cache_entries \
         qwen35_prefix_cache_evictions_total qwen35_prefix_cache_cached_tokens_total qwen35_stage_prefix_cache_bytes \
         qwen35_stage_prefix_cache_hits_total qwen35_stage_prefix_cache_misses_total \
         qwen35_stage_prefix_cache_evictions_total qwen35_replays_total qwen35_spare_promotions_total; do
    grep -q "^$m" "$P35_RUN/metrics.txt" || fail "/metrics has no $m: $(grep "^qwen35_stage" "$P35_RUN/metrics.txt" | tr "\n" " ")"
done

node "$NPM/malformed.mjs" || fail "the malformed-request checks failed"
node "$NPM/browser.mjs" || fail "the browser checks failed"
[ -s "$Q35_SHOT" ] || fail "no screenshot at $Q35_SHOT"
[ -s "${Q35_SHOT%.png}-390.png" ] || fail "no screenshot at ${Q35_SHOT%.png}-390.png"

# /health: 503 with a reason while a stage is down
p35_kill s1 KILL
i=0
until [ "$(curl -s -o "$P35_RUN/h.json" -w '%{http_code}' -H "$AUTH" "$U/health")" = 503 ] || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
grep -q '"reason":"stage 1' "$P35_RUN/h.json" || fail "/health with stage 1 down: $(cat "$P35_RUN/h.json")"
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 2 --max-ctx 4096
i=0
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$U/health")" = 200 ] || [ $i -ge 200 ]; do sleep 0.1; i=$((i + 1)); done
[ $i -lt 200 ] || fail "/health not 200 again after stage 1 came back"

# SIGTERM drains: a stream in flight finishes, new requests get 503, exit 0
curl -sN -H "$AUTH" "$U/v1/completions" \
    -d '{"prompt":[1,2,3],"max_tokens":600,"ignore_eos":true,"temperature":0,"stream":true}' >"$P35_RUN/drain.txt" &
cpid=$!
wait_for "$P35_RUN/drain.txt" '^data: {' 10 || fail "the drain stream did not start"
kill -TERM "$P35_PID_http"
wait_for "$P35_RUN/http.log" 'stopping' 5 || fail "no 'stopping' line after SIGTERM"
code=$(curl -s -o "$P35_RUN/during.json" -w '%{http_code}' -H "$AUTH" "$U/v1/completions" -d '{"prompt":[1],"max_tokens":1}' || true)
wait $cpid || true
rc=0
wait "$P35_PID_http" || rc=$?
P35_PID_http=
grep -q '^data: \[DONE\]' "$P35_RUN/drain.txt" || fail "the stream in flight did not end cleanly on SIGTERM"
[ "$(grep -c '"finish_reason":"length"' "$P35_RUN/drain.txt")" = 1 ] || fail "the stream in flight did not finish on SIGTERM"
[ $rc = 0 ] || fail "qwen35-http exited $rc after SIGTERM"
if grep -q '"finish_reason":"length"' "$P35_RUN/drain.txt" && [ "$code" != 503 ] && [ "$code" != 000 ]; then
    fail "a new request while draining got HTTP $code, not 503"
fi
echo "drain: the stream in flight finished, exit $rc; a new request while draining: HTTP $code"
ok "SDK, SSE, metrics, malformed requests, browser, drain"
