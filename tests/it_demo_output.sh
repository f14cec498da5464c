#!/bin/sh
# make demo's terminal output (client/demo.sh as demo.mk runs it): one
# progress line per phase, apt and compiler output in the log it names
# (never on stdout), the demo's readable part after them, and under 60
# lines in all. The build phase runs make on this build folder with one
# object removed first, so that the log must hold a real compile; the
# model is generated into the temp dir (the tiny preset takes ~1 s).
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-mkmodel qwen35-http qwen35-bench-sampler
# the demo builds make's default configuration: another folder (SAN=1,
# K80=1) holds objects of other flags that this build must not overwrite
[ "$(basename "$BUILD")" = build ] || skip "the demo builds the default folder, not $BUILD"
sh deploy/install-deps.sh >/dev/null 2>&1 || skip "Debian packages missing (make deps installs them)"
OBJ=$BUILD/obj/tools/bench_sampler.o
[ -f "$OBJ" ] || fail "$OBJ missing: not a built tree"
rm -f "$OBJ"
rc=0
DEMO_MODEL=$T/demo.gguf DEMO_LOG=$T/demo.log DEMO_MAKE="make --no-print-directory" \
    QWEN35_BUILD=$BUILD timeout -k 5 "$(p35_scale 300)" sh client/demo.sh >"$T/out" 2>"$T/err" || rc=$?
[ -f "$OBJ" ] || fail "the demo's build did not rebuild $OBJ (exit $rc): $(tail -n 5 "$T/out")"
[ $rc = 0 ] || fail "the demo exited $rc: $(tail -n 20 "$T/out") $(tail -n 10 "$T/err")"

lines=$(wc -l <"$T/out")
[ "$lines" -lt 60 ] || fail "the demo printed $lines lines on stdout (want < 60): $(head -n 20 "$T/out")"
for n in 1 2 3 4; do
    [ "$(grep -c "^\[$n/5\] .* \.\.\. \(done ([0-9]* s)\|skipped (.*)\)$" "$T/out")" = 1 ] ||
        fail "no single finished progress line for phase $n/5: $(grep '^\[' "$T/out")"
done
grep -q '^\[2/5\] building with -j[0-9]* \.\.\. done' "$T/out" || fail "phase 2 did not build: $(grep '^\[2/5\]' "$T/out")"
grep -q '^\[3/5\] generating the model .* done' "$T/out" || fail "phase 3 did not generate: $(grep '^\[3/5\]' "$T/out")"
[ "$(grep -c '^\[5/5\] ' "$T/out")" = 1 ] || fail "no progress line for phase 5/5"
grep -q "output goes to $T/demo.log\$" "$T/out" || fail "stdout does not name the log: $(head -n 3 "$T/out")"
[ -s "$T/demo.log" ] || fail "no log at $T/demo.log"
grep -q -- "-c -o $OBJ tools/bench_sampler.c" "$T/demo.log" ||
    fail "the log holds no compile of $OBJ: $(grep -- ' -o ' "$T/demo.log" | head -n 3)"
grep -q "qwen35-mkmodel: wrote $T/demo.gguf" "$T/demo.log" || fail "the log holds no model generator output"
! grep -q -- '-Werror\|qwen35-mkmodel: wrote' "$T/out" || fail "compiler or generator output on stdout"
grep -q '^demo: user> ' "$T/out" && grep -q '^demo: pipeline status' "$T/out" ||
    fail "the demo's own output is missing: $(tail -n 10 "$T/out")"
if command -v node >/dev/null && command -v curl >/dev/null; then
    grep -q '^demo: the same answer as qwen35-client gave above' "$T/out" || fail "no HTTP part: $(tail -n 5 "$T/out")"
fi
ok "$lines lines on stdout, one per phase: $(grep '^\[[1-4]/5\]' "$T/out" | sed 's/ \.\.\. / /' | tr '\n' ';')"
