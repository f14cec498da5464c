#!/bin/sh
# qwen35-mkmodel and qwen35-info --measure show their progress on a
# terminal, one line rewritten in place (base/cli.h: "\r... 100%"), driven
# here through a pty (script(1)); with stderr not a terminal they print no
# such line (a log or a pipe gets the result only).
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-mkmodel qwen35-info
need script
CR=$(printf '\r')
check() {   # NAME WHAT COMMAND: on a pty a "\rWHAT ... 100%" line; without one none
    timeout -k 5 60 script -qec "$3" /dev/null </dev/null >"$T/pty" 2>&1 || fail "$1 on a pty: $(tail -c 300 "$T/pty")"
    grep -aq "$CR$2 .* 100%" "$T/pty" || fail "$1 on a pty: no '$2 ... 100%' progress line: $(cat -v "$T/pty" | tail -c 300)"
    sh -c "$3" >"$T/out" 2>"$T/err" || fail "$1: $(cat "$T/err")"
    ! grep -aq "$CR" "$T/err" || fail "$1 without a terminal printed progress: $(cat -v "$T/err" | head -c 300)"
    ok "$1: $(tr "$CR" '\n' <"$T/pty" | grep -a "^$2 .* 100%" | head -n 1 | cat -v)"
}
check mkmodel writing "$BIN/qwen35-mkmodel --preset tiny --layers 2 -o $T/m.gguf"
check "info --measure" timing "$BIN/qwen35-info $M --plan 2 --measure --threads 1"
