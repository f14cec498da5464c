#!/bin/sh
# qwen35-tokenize against the golden tokenizer cases, and a decode round trip.
set -eu
. "$(dirname "$0")/lib.sh"
setup
V=$G/tokenizer/qwen3-vocab.gguf
"$BIN/qwen35-tokenize" -m "$V" --cases "$G/tokenizer/cases.txt" > "$T/ids" || fail "--cases: exit $?"
cmp "$T/ids" "$G/tokenizer/expect-ids.txt" || fail "--cases: ids differ from tokenizer/expect-ids.txt"
printf 'round <|im_end|> trip \303\251\n' > "$T/in"
"$BIN/qwen35-tokenize" -m "$V" < "$T/in" > "$T/one" || fail "encode: exit $?"
"$BIN/qwen35-tokenize" -m "$V" --decode < "$T/one" > "$T/back" || fail "decode: exit $?"
cmp "$T/in" "$T/back" || fail "the round trip changed the text: $(cat "$T/back")"
if "$BIN/qwen35-tokenize" -m "$V" --decode <<EOF2 2>"$T/err"; then fail "a bad token id decoded"; fi
1 2 999999
EOF2
grep -q "word 3 '999999' is not a token id" "$T/err" || fail "bad id message: $(cat "$T/err")"
ok "golden cases, round trip, bad id"
