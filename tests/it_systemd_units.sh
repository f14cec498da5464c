#!/bin/sh
# The systemd units: `systemd-analyze verify` prints nothing (it only warns
# on unknown keys and bad values, so any output counts as a failure) and
# `systemd-analyze security --offline=yes` rates every service's exposure
# at 4.0 or below. Units are checked as `make install` writes them.
set -u
. "$(dirname "$0")/lib.sh"
need systemd-analyze
setup
mkdir -p "$T/bin" "$T/units"
# verify checks that ExecStart= is executable: the built daemons when they
# exist, else stand-ins (the unit syntax is what is checked here).
for b in qwen35-stage qwen35-coordinator qwen35-http; do
    if [ -x "$BUILD/bin/$b" ]; then ln -s "$(cd "$BUILD/bin" && pwd)/$b" "$T/bin/$b"
    else printf '#!/bin/sh\n' > "$T/bin/$b"; chmod +x "$T/bin/$b"; fi
done
for u in deploy/systemd/*; do
    sed "s|@BINDIR@|$T/bin|g" "$u" > "$T/units/$(basename "$u")"
done
cd "$T/units" || exit 1
for u in *; do
    out=$(systemd-analyze verify --man=no "./$u" 2>&1)
    [ -z "$out" ] || fail "verify $u: $out"
    ok "verify $u"
done
# The check itself must see a typo (else an empty output proves nothing).
sed 's/^WatchdogSec=/WatchdogSecs=/' qwen35-coordinator.service > "$T/typo.service"
if [ -z "$(systemd-analyze verify --man=no "$T/typo.service" 2>&1)" ]; then
    fail "verify stays silent on an unknown key"
fi
# The limits the daemons compare theirs with (daemon/limits.h) are the ones
# the units ask.
want=$(sed -n 's/^#define LIMITS_NOFILE \([0-9]*\).*/\1/p' "$OLDPWD/daemon/limits.h")
for u in qwen35-stage@.service qwen35-coordinator.service; do
    grep -qx "LimitNOFILE=$want" "$u" || fail "$u: LimitNOFILE= is not $want (daemon/limits.h LIMITS_NOFILE)"
done
grep -qx "LimitMEMLOCK=infinity" qwen35-stage@.service || fail "qwen35-stage@.service: LimitMEMLOCK= is not infinity (daemon/limits.c)"
cp qwen35-stage@.service qwen35-stage@0.service
for u in qwen35-stage@0.service qwen35-coordinator.service qwen35-http.service qwen35-wait-up.service qwen35-wait-down.service; do
    out=$(systemd-analyze security --offline=yes --threshold=40 "./$u" 2>&1)
    rc=$?
    score=$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    if [ $rc -ne 0 ] || [ -z "$score" ]; then
        fail "security $u: exposure ${score:-?} > 4.0 (rc $rc): $(printf '%s\n' "$out" | grep -E '^✗' | head -20)"
    fi
    ok "security $u: exposure $score"
done
