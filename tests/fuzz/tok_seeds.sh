#!/bin/sh
# Seeds for fuzz_tok into DIR: each case of the golden tokenizer cases file
# (blocks separated by "__case__" lines) in both encode modes, a few
# hand-made strings (special tokens, invalid UTF-8), and id lists.
# Usage: tok_seeds.sh DIR [CASES_FILE]
set -e
dir=$1
cases=$2
n=0
seed() {   # seed NAME MODE-BYTE-OCTAL: content on stdin
    { printf "\\$2"; cat; } >"$dir/$1"
}
if [ -n "$cases" ] && [ -f "$cases" ]; then
    awk -v dir="$dir" '
        function flush() { if (have) { f = sprintf("%s/case-%03d", dir, n++); printf "%s", buf > f; close(f) } buf = ""; have = 0 }
        /^__case__$/ { flush(); next }
        { buf = have ? buf "\n" $0 : $0; have = 1 }
        END { flush() }' "$cases"
    for f in "$dir"/case-*; do
        seed "$(basename "$f")-plain" 000 <"$f"
        seed "$(basename "$f")-special" 002 <"$f"
        rm -f "$f"
    done
fi
printf '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|endoftext|>' | seed chat-special 002
printf '<|im_start|>user\nhi<|im_end|>' | seed chat-plain 000
printf 'bad \377\376 utf8 \300\257 \355\240\200 \364\220\200\200 tail \342\202' | seed invalid-utf8 000
printf 'caf\303\251 \344\270\255\346\226\207 \360\237\230\200 \360\237\221\250\342\200\215\360\237\221\251' | seed utf8-mixed 000
printf '\000\001\002 nul \000 bytes' | seed nul-bytes 002
printf '\000\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017' | seed ids-u16 001
printf '\377\377\377\377\000\000\000\200\001\000\000\000\002\000\001\000' | seed ids-u32 003
