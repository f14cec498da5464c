#!/bin/sh
# The man pages generated from the option tables: groff reads them without
# a warning, and every option of the table appears in its page and in
# --help (the table drives both).
set -u
BUILD=${QWEN35_BUILD:-build}
fail=0
for prog in qwen35-stage qwen35-coordinator qwen35-http; do
    page=$BUILD/man/$prog.1
    [ -s "$page" ] || { echo "FAIL $page missing"; fail=1; continue; }
    warn=$(groff -man -ww -z "$page" 2>&1)
    if [ -n "$warn" ]; then echo "FAIL groff warnings in $page:"; echo "$warn"; fail=1; continue; fi
    help=$("$BUILD/bin/$prog" --help) || { echo "FAIL $prog --help exits non-zero"; fail=1; continue; }
    text=$(groff -man -Tutf8 "$page" 2>/dev/null | sed 's/.\x08//g')
    for opt in $(printf '%s\n' "$help" | sed -n 's/^  --\(\[no-\]\)\{0,1\}\([a-z-]*\).*/\2/p'); do
        printf '%s\n' "$text" | grep -q -- "--$opt" || { echo "FAIL $prog: --$opt in --help, not in the man page"; fail=1; }
    done
    echo "ok   $prog: man page clean, $(printf '%s\n' "$help" | grep -c '^  --') options in --help and the page"
done
exit $fail
