#!/bin/sh
# --version: every program in $BUILD/bin prints one line naming itself,
# its release and commit ("qwen35-stage 0.7.0 (git 214a7e5, built with
# ...)") and exits 0; the option system's built-in for the programs with
# a table, a check of their own for the few without one.
set -eu
. "$(dirname "$0")/lib.sh"
setup
n=0
for b in "$BIN"/*; do
    [ -x "$b" ] && [ -f "$b" ] || continue
    name=$(basename "$b")
    "$b" --version >"$T/out" 2>"$T/err" && rc=0 || rc=$?
    [ $rc -eq 0 ] || fail "$name --version: exit $rc: $(cat "$T/err")"
    [ "$(wc -l <"$T/out")" -eq 1 ] || fail "$name --version: want one line, got: $(cat "$T/out")"
    grep -Eq "^$name [0-9][0-9.]* \(git [^,]+, built with [^,]+, -O[^,]*, (CUDA archs [0-9 ]+|no CUDA)\)\$" "$T/out" ||
        fail "$name --version: $(cat "$T/out")"
    n=$((n + 1))
done
[ $n -gt 5 ] || fail "only $n programs in $BIN"
ok "$n programs answer --version: $(head -c 120 "$T/out")"
