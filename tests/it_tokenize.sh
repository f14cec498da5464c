#!/bin/sh
# qwen35-tokenize against the golden tokenizer cases, and a decode round trip.
set -eu
B=${QWEN35_BUILD:-build}/bin
G=${QWEN35_GOLDEN:-../shared/golden}/tokenizer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$B/qwen35-tokenize" -m "$G/qwen3-vocab.gguf" --cases "$G/cases.txt" > "$tmp/ids"
cmp "$tmp/ids" "$G/expect-ids.txt"
printf 'round <|im_end|> trip \303\251\n' > "$tmp/in"
"$B/qwen35-tokenize" -m "$G/qwen3-vocab.gguf" < "$tmp/in" > "$tmp/one"
"$B/qwen35-tokenize" -m "$G/qwen3-vocab.gguf" --decode < "$tmp/one" > "$tmp/back"
cmp "$tmp/in" "$tmp/back"
if "$B/qwen35-tokenize" -m "$G/qwen3-vocab.gguf" --decode <<EOF2 2>"$tmp/err"; then exit 1; fi
1 2 999999
EOF2
grep -q "word 3 '999999' is not a token id" "$tmp/err"
echo "it_tokenize: ok"
