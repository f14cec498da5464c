#!/bin/sh
# qwen35-client on its own: usage errors exit 2 with a message naming the
# option; an absent coordinator is a clear error (exit 1) within the
# connect timeout, never a hang; bad --prompt-ids files are named.
set -u
. "$(dirname "$0")/lib.sh"
setup
B=$BIN/qwen35-client
D=$T
expect() {   # expect RC PATTERN -- ARGS…
    want=$1 pat=$2
    shift 3
    "$B" "$@" >"$D/out" 2>"$D/err" </dev/null
    rc=$?
    if [ $rc -ne "$want" ] || ! grep -q -- "$pat" "$D/err"; then
        fail "qwen35-client $*: exit $rc (want $want), stderr: $(cat "$D/err")"
    fi
}
EP="ipc://$D/nobody.sock"
expect 2 "exactly one" -- --endpoint "$EP"
expect 2 "one prompt argument" -- --endpoint "$EP" a b
expect 2 "-ngl: llama.cpp" -- -ngl 99 hi
expect 2 "-t: not a qwen35-client option" -- -t 4 hi
expect 2 "'x' is not an integer" -- -n x hi
expect 2 "--top-k" -- --top-k -3 hi
expect 2 "--logprobs" -- --logprobs 99 hi
expect 2 "--seed" -- --seed -1 hi
expect 2 "--temp" -- --temp abc hi
expect 2 "give one of" -- --prompt-ids x --chat
expect 1 "top_p = 2 (expected 0 < top_p <= 1" -- --endpoint "$EP" --top-p 2 hi
expect 1 "temperature" -- --endpoint "$EP" --temp -1 hi
expect 1 "endpoint 'tcp://nohost'" -- --endpoint tcp://nohost hi
printf '1 2 x3 4' >"$D/bad.ids"
expect 1 "item 3: 'x3'" -- --endpoint "$EP" --prompt-ids "$D/bad.ids"
: >"$D/empty.ids"
expect 1 "no token ids" -- --endpoint "$EP" --prompt-ids "$D/empty.ids"
expect 1 "No such file" -- --endpoint "$EP" --prompt-ids "$D/missing.ids"
t0=$(date +%s%N)
expect 1 "no connection within 400 ms" -- --endpoint "$EP" --connect-timeout 400 hello
expect 1 "no connection within 400 ms" -- --endpoint "$EP" --connect-timeout 400 --status
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $ms -lt 4000 ] || fail "two absent-coordinator calls took $ms ms"
"$B" --help | grep -q -- "--prompt-ids" || fail "--help"
ok "usage errors, bad id files, absent coordinator: 2 calls in $ms ms"
