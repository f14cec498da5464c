#!/bin/sh
# make install DESTDIR=...: the user-facing binaries in bin, the others in
# lib/qwen35, units, sysusers.d, man pages and example configs in place, the
# model and key directories created, the two-die units enabled; the
# installed units' ExecStart lines with the installed configs (edited as an
# operator would: golden model, CPU) serve a request from qwen35-client with
# no endpoint flag (as root: in a private mount namespace, so /run/qwen35 is
# its own); make uninstall leaves no file behind.
set -u
. "$(dirname "$0")/lib.sh"
setup
MODEL=$(cd "$(dirname "$M")" && pwd)/tiny-Q8_0.gguf
D=$T/root

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
for b in qwen35-mkmodel qwen35-bench qwen35-bench-quant; do
    [ -e "$B/$b" ] && fail "$b installed in bin (not a user-facing program)"
    [ -x "$D/usr/local/lib/qwen35/$b" ] || fail "$b not in /usr/local/lib/qwen35"
done
for b in qwen35-run qwen35-info qwen35-tokenize qwen35-keygen qwen35-http; do [ -x "$B/$b" ] || fail "$b not in bin"; done
[ "$(stat -c %a "$D/etc/qwen35/keys")" = 700 ] || fail "/etc/qwen35/keys not mode 0700"
# CURVE keys for tcp:// (a secret 0600 and a public key per unit; the
# coordinator's public key in clients), ready for curve-secret-key / stage-key
for k in coordinator stage-0 stage-1; do
    [ "$(stat -c %a "$D/etc/qwen35/keys/$k.key" 2>/dev/null)" = 600 ] || fail "keys/$k.key missing or not mode 0600"
    [ "$(wc -c < "$D/etc/qwen35/keys/$k.pub" 2>/dev/null)" -ge 40 ] || fail "keys/$k.pub missing"
done
grep -qxF "$(cat "$D/etc/qwen35/keys/coordinator.pub")" "$D/etc/qwen35/keys/clients" ||
    fail "keys/clients does not list the coordinator's public key"
cmp -s "$D/etc/qwen35/keys/stage-0.key" "$D/etc/qwen35/keys/stage-1.key" && fail "two stages got the same key"
cp "$D/etc/qwen35/keys/stage-0.pub" "$T/s0.pub.before"
[ -d "$D/srv/qwen35/models" ] || fail "/srv/qwen35/models not created"
grep -q '^g qwen35 ' "$D/usr/local/lib/sysusers.d/qwen35.conf" || fail "no sysusers.d entry for the group qwen35"
W=$D/etc/systemd/system/qwen35.target.wants
for u in qwen35-stage@0 qwen35-stage@1 qwen35-coordinator qwen35-http; do
    l=$(readlink "$W/$u.service") || fail "make install did not enable $u (qwen35.target.wants)"
    case $l in /usr/local/lib/systemd/system/qwen35-stage@.service|/usr/local/lib/systemd/system/$u.service) ;;
        *) fail "$W/$u.service -> $l";; esac
done
ok "make install: $(find "$D" -type f | wc -l) files; bench/mkmodel in lib/qwen35; keys 0700; models dir; two-die units enabled"

# an existing config is never overwritten
echo "# edited" >> "$D/etc/qwen35/stage-1.conf"
make -s --no-print-directory install BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 || fail "second make install"
tail -n 1 "$D/etc/qwen35/stage-1.conf" | grep -q '^# edited$' || fail "make install overwrote an existing config"
cmp -s "$T/s0.pub.before" "$D/etc/qwen35/keys/stage-0.pub" || fail "a second make install replaced a CURVE key"
ok "make install keeps an existing /etc/qwen35 config and its CURVE keys (made once: coordinator, stage-0, stage-1, clients)"

# The installed units' ExecStart, %i expanded and paths under DESTDIR, with
# the installed configs edited as an operator would (the golden model, CPU,
# one thread); the client with no endpoint flag.
E=$T/etc
mkdir -p "$E"
for i in 0 1; do
    sed -e "s|^model = .*|model = $MODEL|" -e "s|^layers = .*|layers = $((i * 4)):$((i * 4 + 4))|" \
        -e 's|^backend = .*|backend = cpu\nthreads = 1|' -e '/^device = /d' -e 's|^max-ctx = .*|max-ctx = 2048|' \
        "$D/etc/qwen35/stage-$i.conf" >"$E/stage-$i.conf"
    grep -q "^bind = ipc:///run/qwen35/stage-$i.sock$" "$E/stage-$i.conf" ||
        fail "the installed stage-$i.conf does not bind ipc:///run/qwen35/stage-$i.sock: $(grep '^bind' "$E/stage-$i.conf")"
done
sed -e "s|^model = .*|model = $MODEL|" -e 's|^max-ctx = .*|max-ctx = 2048|' \
    "$D/etc/qwen35/coordinator.conf" >"$E/coordinator.conf"
grep -q "^[a-z]* = tcp://" "$D"/etc/qwen35/*.conf && fail "an installed config uses plaintext TCP: $(grep -H "^[a-z]* = tcp://" "$D"/etc/qwen35/*.conf)"
[ "$(cat "$D/usr/local/lib/tmpfiles.d/qwen35.conf" | grep -v '^#')" = "d /run/qwen35 0770 root qwen35 -" ] ||
    fail "tmpfiles.d/qwen35.conf: $(grep -v '^#' "$D/usr/local/lib/tmpfiles.d/qwen35.conf")"
grep -q '^listen = ipc:///run/qwen35/coordinator.sock$' "$E/coordinator.conf" ||
    fail "the installed coordinator.conf does not listen on qwen35-client's default endpoint"
"$B/qwen35-client" --help 2>&1 | tr -s ' \n' ' ' | grep -q 'default ipc:///run/qwen35/coordinator.sock' ||
    fail "qwen35-client's default endpoint is not ipc:///run/qwen35/coordinator.sock"
execstart() {   # execstart UNIT-FILE INSTANCE: its command line, paths under $D and $E
    sed -n 's/^ExecStart=//p' "$D/usr/local/lib/systemd/system/$1" |
        sed -e "s|%i|$2|g" -e "s|/usr/local/|$D/usr/local/|" -e "s|/etc/qwen35/|$E/|"
}
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "$ME: not run: the installed units' ExecStart with the client's default endpoint needs root and unshare (a private /run/qwen35)"
else
    # in a private mount namespace: /run is a fresh tmpfs there only
    cat >"$T/run.sh" <<EOF
set -u
mount -t tmpfs -o mode=0755 tmpfs /run || exit 1
mkdir -m 0770 /run/qwen35   # what tmpfiles.d/qwen35.conf does
$(execstart qwen35-stage@.service 0) 2>"$T/s0.err" & p0=\$!
$(execstart qwen35-stage@.service 1) 2>"$T/s1.err" & p1=\$!
$(execstart qwen35-coordinator.service "") 2>"$T/coord.err" & pc=\$!
echo "1 2 3 4" > "$T/prompt"
i=0
until "$B/qwen35-client" --prompt-ids "$T/prompt" -n 8 --ids >"$T/out" 2>"$T/client.err"; do
    i=\$((i + 1)); [ \$i -gt 30 ] && break; sleep 1
done
kill -TERM \$pc; wait \$pc; rc=\$?
kill -TERM \$p0 \$p1; wait \$p0 || rc=1; wait \$p1 || rc=1
exit \$rc
EOF
    grep -q "^$D/usr/local/bin/qwen35-stage --config $E/stage-0.conf " "$T/run.sh" || fail "ExecStart: $(grep qwen35-stage "$T/run.sh" | head -n 1)"
    timeout 90 unshare --mount --propagation private sh "$T/run.sh" || fail "a daemon exited non-zero after SIGTERM (or timed out)"
    [ "$(wc -w < "$T/out")" -eq 8 ] || fail "qwen35-client with no endpoint flag: expected 8 token ids, got: $(cat "$T/out" "$T/client.err")"
    ok "the installed units' ExecStart + installed configs: qwen35-client with no endpoint flag served: $(cat "$T/out")"
fi

# uninstall: the edited config stays, everything else goes
# (a key list the operator changed stays too)
echo "# another coordinator" >> "$D/etc/qwen35/keys/clients"
make -s --no-print-directory uninstall BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 || fail "make uninstall"
left=$(find "$D" \( -type f -o -type l \) ! -path "$D/etc/qwen35/stage-1.conf" ! -path "$D/etc/qwen35/keys/clients")
[ -z "$left" ] || fail "make uninstall left: $left"
[ -f "$D/etc/qwen35/stage-1.conf" ] || fail "make uninstall removed an edited config"
[ -f "$D/etc/qwen35/keys/clients" ] || fail "make uninstall removed a changed keys/clients"
rm "$D/etc/qwen35/stage-1.conf" "$D/etc/qwen35/keys/clients"
make -s --no-print-directory uninstall BUILD="$BUILD" DESTDIR="$D" PREFIX=/usr/local >/dev/null 2>&1 || fail "make uninstall (2)"
left=$(find "$D" \( -type f -o -type l \))
[ -z "$left" ] || fail "make uninstall left: $left"
[ -d "$D/etc/qwen35" ] && fail "make uninstall left the empty /etc/qwen35"
ok "make uninstall leaves nothing behind (an edited config stays until removed by hand)"
