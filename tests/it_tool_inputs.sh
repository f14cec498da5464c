#!/bin/sh
# Inputs the tools must refuse at once, and one limit across the fronts:
# - qwen35-run, qwen35-info and qwen35-tokenize given a FIFO as the model
#   exit non-zero with "not a regular file (a FIFO)" instead of waiting
#   for a writer forever (the daemons already refuse it, it_pipeline_owner)
# - qwen35-http's max-messages defaults to the coordinator's limit (1024)
#   and cannot be set past it; through the pipeline a chat of 1024
#   messages passes both fronts' count (the coordinator refuses only its
#   length in tokens), one of 1025 gets 400 from qwen35-http naming the
#   field and its limit
set -eu
. "$(dirname "$0")/lib.sh"
setup
mkfifo "$P35_RUN/fifo.gguf"
LIM=$(p35_scale 20)
fifo() {   # fifo NAME ARGS...: refused, not hung
    _n=$1
    shift
    rc=0
    echo hi | timeout "$LIM" "$BIN/$_n" "$@" >"$P35_RUN/$_n.out" 2>&1 || rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$_n with a FIFO as the model: exit $rc (124: hung)"
    grep -q "fifo.gguf: not a regular file (a FIFO)" "$P35_RUN/$_n.out" ||
        fail "$_n with a FIFO: no clear message: $(tail -n 1 "$P35_RUN/$_n.out")"
    echo "$_n: FIFO refused, exit $rc: $(tail -n 1 "$P35_RUN/$_n.out")"
}
fifo qwen35-run -m "$P35_RUN/fifo.gguf" -p hi -n 1
fifo qwen35-info "$P35_RUN/fifo.gguf"
fifo qwen35-tokenize -m "$P35_RUN/fifo.gguf"

if [ -x "$BIN/qwen35-http" ] && command -v curl >/dev/null; then
    "$BIN/qwen35-http" --help | grep -q -- "--max-messages N.*(default 1024; 1..1024)" ||
        fail "qwen35-http max-messages: not default 1024, at most 1024: $("$BIN/qwen35-http" --help | grep -- --max-messages)"
    rc=0
    "$BIN/qwen35-http" --max-messages 1025 --coordinator ipc:///nonexistent >"$P35_RUN/hm.out" 2>&1 || rc=$?
    [ $rc -eq 78 ] || fail "qwen35-http --max-messages 1025: exit $rc, expected 78 ($(tail -n 1 "$P35_RUN/hm.out"))"
    p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 2 --max-ctx 4096
    p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 2 --max-ctx 4096
    p35_coord "$M" s0 s1 -- --max-seqs 2 --max-ctx 4096
    p35_wait_ready 60
    "$BIN/qwen35-http" --listen 127.0.0.1:0 --coordinator "$P35_EP" >"$P35_RUN/http.log" 2>&1 &
    P35_PID_http=$!
    P35_NAMES="$P35_NAMES http"
    wait_for "$P35_RUN/http.log" "the coordinator answers" 20 || fail "qwen35-http did not come up"
    PORT=$(sed -n 's|.*serving http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$P35_RUN/http.log" | head -n 1)
    chat() {   # chat N: a chat request of N one-letter messages; prints the HTTP status
        awk -v n="$1" 'BEGIN { printf "{\"max_tokens\":1,\"messages\":["
            for (i = 0; i < n; i++) printf "%s{\"role\":\"%s\",\"content\":\"a\"}", i ? "," : "", i % 2 ? "assistant" : "user"
            printf "]}" }' >"$P35_RUN/chat.json"
        curl -s -o "$P35_RUN/chat.out" -w '%{http_code}' -H 'Content-Type: application/json' \
            --max-time "$(p35_scale 60)" --data-binary @"$P35_RUN/chat.json" "http://127.0.0.1:$PORT/v1/chat/completions"
    }
    # 1024 one-letter messages are ~8200 tokens, past the tiny model's
    # 4096: that the coordinator says so means neither front refused the
    # count (the coordinator checks it before it tokenizes)
    code=$(chat 1024)
    [ "$code" = 400 ] && grep -q '"code":"context_length_exceeded"' "$P35_RUN/chat.out" ||
        fail "1024 messages: HTTP $code: $(head -c 300 "$P35_RUN/chat.out")"
    code=$(chat 100)
    [ "$code" = 200 ] || fail "100 messages: HTTP $code: $(head -c 300 "$P35_RUN/chat.out")"
    code=$(chat 1025)
    [ "$code" = 400 ] && grep -q "1025 messages: at most 1024" "$P35_RUN/chat.out" ||
        fail "1025 messages: HTTP $code: $(head -c 300 "$P35_RUN/chat.out")"
    echo "max-messages: 100 messages served, 1024 past the count checks, 1025: HTTP $code $(head -c 160 "$P35_RUN/chat.out")"
fi
ok "FIFOs refused by the tools, one message limit"
