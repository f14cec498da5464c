#!/bin/sh
# make install DESTDIR=...: the binaries, units, man pages and example
# configs land in place; the installed two-die example config, started by
# hand with the installed binaries (model and endpoints overridden by
# flags), serves a request; make uninstall leaves no file behind.
set -u
BUILD=${QWEN35_BUILD:-build}
MODEL=$(cd "$(dirname "${QWEN35_GOLDEN:-../shared/golden}/models/tiny-Q8_0.gguf")" && pwd)/tiny-Q8_0.gguf
T=$(mktemp -d /tmp/q35-it-install-XXXXXX)
D=$T/root
PIDS=""
cleanup() {
    for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done
    for p in $PIDS; do wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    for f in "$T"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
    exit 1
}
ok() { echo "ok   $*"; }

make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >"$T/install.out" 2>&1 \
    || { cat "$T/install.out"; fail "make install"; }
B=$D/usr/local/bin
for f in bin/qwen35-stage bin/qwen35-coordinator bin/qwen35-client \
         lib/systemd/system/qwen35-stage@.service lib/systemd/system/qwen35-coordinator.service \
         lib/systemd/system/qwen35.target share/man/man1/qwen35-stage.1 share/man/man1/qwen35-coordinator.1; do
    [ -e "$D/usr/local/$f" ] || fail "make install did not install /usr/local/$f"
done
for f in stage-0.conf stage-1.conf coordinator.conf; do
    [ -f "$D/etc/qwen35/$f" ] || fail "make install did not install /etc/qwen35/$f"
done
grep -q "^ExecStart=/usr/local/bin/qwen35-stage --config /etc/qwen35/stage-%i.conf$" \
    "$D/usr/local/lib/systemd/system/qwen35-stage@.service" || fail "ExecStart= not pointing at the installed binary"
[ -x "$B/qwen35-mkman" ] && fail "internal tool qwen35-mkman installed"
ok "make install: $(find "$D" -type f | wc -l) files"

# an existing config is never overwritten
echo "# edited" >> "$D/etc/qwen35/stage-1.conf"
make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 || fail "second make install"
tail -n 1 "$D/etc/qwen35/stage-1.conf" | grep -q '^# edited$' || fail "make install overwrote an existing config"
ok "make install keeps an existing /etc/qwen35 config"

# The installed example (two dies of one card) run by hand on the CPU (bare
# --stage endpoints: the coordinator learns the ranges from the stages): the
# config is used as shipped, the flags override model, endpoints, backend.
"$B/qwen35-stage" --config "$D/etc/qwen35/stage-0.conf" --model "$MODEL" --layers 0:4 \
    --bind "ipc://$T/s0.sock" --backend cpu --threads 1 2>"$T/s0.err" &
PIDS="$PIDS $!"
"$B/qwen35-stage" --config "$D/etc/qwen35/stage-1.conf" --model "$MODEL" --layers 4:8 \
    --bind "ipc://$T/s1.sock" --backend cpu --threads 1 2>"$T/s1.err" &
PIDS="$PIDS $!"
"$B/qwen35-coordinator" --config "$D/etc/qwen35/coordinator.conf" --model "$MODEL" \
    --listen "ipc://$T/c.sock" --stage "ipc://$T/s0.sock" --stage "ipc://$T/s1.sock" 2>"$T/coord.err" &
PIDS="$PIDS $!"
echo "1 2 3 4" > "$T/prompt"
i=0
until "$B/qwen35-client" --endpoint "ipc://$T/c.sock" --prompt-ids "$T/prompt" -n 8 --ids >"$T/out" 2>"$T/client.err"; do
    i=$((i + 1)); [ $i -gt 30 ] && fail "the installed pipeline served no request within 30 s"; sleep 1
done
[ "$(wc -w < "$T/out")" -eq 8 ] || fail "expected 8 token ids, got: $(cat "$T/out")"
ok "installed binaries + example configs serve a request: $(cat "$T/out")"
for p in $PIDS; do kill -TERM "$p"; done
for p in $PIDS; do wait "$p" || fail "a daemon exited non-zero after SIGTERM"; done
PIDS=""

# uninstall: the edited config stays, everything else goes
make -s --no-print-directory uninstall BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 || fail "make uninstall"
left=$(find "$D" \( -type f -o -type l \) ! -path "$D/etc/qwen35/stage-1.conf")
[ -z "$left" ] || fail "make uninstall left: $left"
[ -f "$D/etc/qwen35/stage-1.conf" ] || fail "make uninstall removed an edited config"
rm "$D/etc/qwen35/stage-1.conf"
make -s --no-print-directory uninstall BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 || fail "make uninstall (2)"
left=$(find "$D" \( -type f -o -type l \))
[ -z "$left" ] || fail "make uninstall left: $left"
[ -d "$D/etc/qwen35" ] && fail "make uninstall left the empty /etc/qwen35"
ok "make uninstall leaves nothing behind (an edited config stays until removed by hand)"
exit 0
