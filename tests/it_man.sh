#!/bin/sh
# Every installed program's man page, generated from its option table
# (--man): groff reads it without a warning; every flag --help shows (the
# same table) is in the page; EXAMPLES follow deploy/README.md (loopback or
# CURVE, never a bare tcp://0.0.0.0; models under /srv/qwen35/models);
# SEE ALSO names the other pages and not the page itself.
set -u
. "$(dirname "$0")/lib.sh"
need groff
progs="qwen35-stage qwen35-coordinator qwen35-http qwen35-run qwen35-client qwen35-info qwen35-tokenize qwen35-keygen qwen35-mkmodel"
for prog in $progs; do
    page=$BUILD/man/$prog.1
    [ -s "$page" ] || fail "$page missing"
    warn=$(groff -man -ww -z "$page" 2>&1)
    [ -z "$warn" ] || fail "groff warnings in $page: $warn"
    help=$("$BUILD/bin/$prog" --help) || fail "$prog --help exits non-zero"
    text=$(groff -man -Tutf8 "$page" 2>/dev/null | sed 's/.\x08//g')
    # the flags of each option line: its spellings up to the help text
    flags=$(printf '%s\n' "$help" | grep '^  -' | sed 's/^  //; s/  .*//' |
            tr ',' '\n' | awk '{ print $1 }' | sed 's/\[no-\]//')
    n=0
    for f in $flags; do
        n=$((n + 1))
        printf '%s\n' "$text" | grep -q -- "$f" || fail "$prog: $f in --help, not in the man page"
    done
    printf '%s\n' "$text" | grep -q '^EXAMPLES' || fail "$prog: no EXAMPLES"
    printf '%s\n' "$text" | grep -q '0\.0\.0\.0' && fail "$prog: tcp://0.0.0.0 in the page"
    if printf '%s\n' "$text" | sed -n '/^EXAMPLES/,/^SEE ALSO/p' | grep -q 'model'; then
        printf '%s\n' "$text" | sed -n '/^EXAMPLES/,/^SEE ALSO/p' | grep -q '/srv/qwen35/models/' ||
            fail "$prog: EXAMPLES without the units' model path /srv/qwen35/models"
    fi
    see=$(printf '%s\n' "$text" | sed -n '/^SEE ALSO/,$p')
    printf '%s\n' "$see" | grep -q "$prog(1)" && fail "$prog: SEE ALSO names itself"
    for other in $progs; do
        [ "$other" = "$prog" ] && continue
        printf '%s\n' "$see" | tr -d '\n ' | grep -q "$other(1)" || fail "$prog: SEE ALSO lacks $other"
    done
    ok "$prog: man page clean, $n flags of --help in the page, EXAMPLES, SEE ALSO"
done
