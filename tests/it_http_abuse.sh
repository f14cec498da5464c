#!/bin/sh
# qwen35-http under abuse (issue #25 section 3), 2 stages + a coordinator
# on the golden tiny model, hostile clients on loopback (tests/http/abuse.mjs):
# request smuggling (400 and close), top_logprobs/logprobs 20, /health
# (status alone without the key, cached), slowloris (260 connections
# dripping a header byte a second over max-connections 256: new clients
# still served), a stream cut by drain-timeout-s (error event + [DONE]),
# and 300 concurrent streams at a soft RLIMIT_NOFILE of 1024 (raised to
# the hard limit) and at a hard one of 1024 (bounded: 429/503, no abort,
# no reset).
# Q35_HTTP_BIN: another qwen35-http to try (the one before a fix).
set -eu
. "$(dirname "$0")/lib.sh"
HTTP_BIN=${Q35_HTTP_BIN:-$BIN/qwen35-http}
[ -x "$HTTP_BIN" ] || fail "$HTTP_BIN missing"
need node curl
setup
npm_clients
READY_S=30 pipe2 4 4096 --max-ctx 4096 --max-seqs 4 --max-queue 64
KEY=sk-abuse-$$
printf '%s\n' "$KEY" >"$P35_RUN/keys"
READ_TIMEOUT=2

# start_http NAME LIMITS [options]: qwen35-http under `ulimit LIMITS`
start_http() {
    _n=$1
    HTTP_ULIMIT=$2
    shift 2
    http_front "$_n" --api-key-file "$P35_RUN/keys" "$@"
    export Q35_BASE=$U Q35_KEY=$KEY
}
alive() { eval "kill -0 \$P35_PID_$1" 2>/dev/null; }

RT="--read-timeout-s $READ_TIMEOUT"
"$HTTP_BIN" --help 2>&1 | grep -q read-timeout-s || RT=""      # a build from before it (Q35_HTTP_BIN)
start_http h1 "-n $(ulimit -Hn)" $RT --drain-timeout-s 1
export Q35_COORD_PID=$P35_PID_coord Q35_DRIP=260 Q35_READ_TIMEOUT_S=$READ_TIMEOUT
for check in smuggle logprobs health slowloris slowgen; do
    node "$NPM/abuse.mjs" $check || fail "$check"
done
alive h1 || fail "qwen35-http died: $(tail -n 5 "$P35_RUN/h1.log")"

# drain-timeout-s 1: a long stream is cut, with an error event and [DONE]
curl -sN -H "Authorization: Bearer $KEY" "$Q35_BASE/v1/completions" \
    -d '{"prompt":[1,2,3],"max_tokens":3000,"ignore_eos":true,"temperature":0,"stream":true}' >"$P35_RUN/cut.txt" &
cpid=$!
wait_for "$P35_RUN/cut.txt" '^data: {' 10 || fail "the stream did not start"
kill -TERM "$P35_PID_h1"
wait $cpid || true
rc=0
wait "$P35_PID_h1" || rc=$?
P35_PID_h1=
tail -n 3 "$P35_RUN/cut.txt" | cut -c 1-200 >"$P35_RUN/cut.tail"
if ! grep -q '^data: {"error"' "$P35_RUN/cut.txt"; then
    fail "the stream cut at drain-timeout-s has no error event: $(cat "$P35_RUN/cut.tail")"
elif [ "$(tail -n 2 "$P35_RUN/cut.txt" | head -n 1)" != "data: [DONE]" ]; then
    fail "the cut stream does not end with data: [DONE]: $(cat "$P35_RUN/cut.tail")"
elif [ $rc != 0 ]; then
    fail "qwen35-http exited $rc after SIGTERM"
else
    ok "drain-timeout-s 1: the stream cut after $(grep -c '^data: {"id"' "$P35_RUN/cut.txt") chunks ends with an error event and [DONE]; exit 0"
fi

# 300 concurrent streams at a soft fd limit of 1024 (the hard one higher):
# raised at start, every one answered
export Q35_FLOOD=300
if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -gt 4096 ]; then
    start_http h2 "-Sn 1024"
    node "$NPM/abuse.mjs" flood || fail "flood at soft RLIMIT_NOFILE 1024: $(grep -i 'abort\|error' "$P35_RUN/h2.log" | head -n 3)"
    alive h2 || fail "qwen35-http died in the flood at soft RLIMIT_NOFILE 1024: $(tail -n 3 "$P35_RUN/h2.log")"
    p35_kill h2 TERM
else
    echo "$ME: not run: the hard RLIMIT_NOFILE $(ulimit -Hn) leaves no room to test raising the soft one"
fi
# ... and at a hard limit of 1024: fewer served at once, the rest refused or waiting, no crash
start_http h3 "-n 1024"
grep -q "RLIMIT_NOFILE leaves room for" "$P35_RUN/h3.log" || fail "no line on the lowered max-connections at RLIMIT_NOFILE 1024"
node "$NPM/abuse.mjs" flood || fail "flood at RLIMIT_NOFILE 1024: $(grep -i 'abort\|error' "$P35_RUN/h3.log" | head -n 3)"
alive h3 || fail "qwen35-http died in the flood at RLIMIT_NOFILE 1024: $(tail -n 3 "$P35_RUN/h3.log")"
ok "smuggling, slowloris, drain timeout, floods at RLIMIT_NOFILE 1024"
