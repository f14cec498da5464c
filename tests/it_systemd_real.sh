#!/bin/sh
# The units under a REAL systemd: a Debian 12 root (debootstrap, cached in
# $QWEN35_SD_BASE, built here when absent) booted with systemd-nspawn,
# the project installed into it with `make install DESTDIR=`, the installed
# two-die example configs edited as an operator would (the golden tiny
# model split in 2 CPU stages), then, with the units exactly as installed:
#   start of qwen35.target; READY=1 after load and bind; STATUS=; golden
#   greedy ids through qwen35-client with no endpoint flag (the socket in
#   /run/qwen35, group qwen35); effective limits logged when clamped; live
#   security exposure <= 4.0; watchdog pings; a typo'd config exits 78, no
#   restart; kill -9 -> Restart= and routed to again; a hung stage killed by
#   the watchdog (test-hook drop-in) and back; restart of qwen35.target
#   (every unit comes back); stop of qwen35.target with a long request in
#   flight: it finishes, all units exit 0, and the stop returns only once
#   they are down;
#   `systemctl enable --now qwen35.target` + reboot brings all up; no
#   journal line at warning or above in the clean phases; /dev/nvidia* in a
#   stage's sandbox when the host has them.
# Skipped (one line, exit 77) when not root, or when systemd-nspawn cannot
# boot a container here. Units to check: those make install enables
# (qwen35.target.wants), so a new unit there is checked too.
# Env: QWEN35_SD_BASE (default /var/tmp/qwen35-sd-base-HASH), MIRROR (default: the
# one apt uses), KEEP=1 keeps the work dir.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u -o pipefail
. "$(dirname "$0")/lib.sh"
SRC=$(pwd)
BUILD=$(cd "$BUILD" && pwd) || exit 1
GOLDEN=$(cd "$G" && pwd) || exit 1
MODEL=$GOLDEN/models/tiny-Q8_0.gguf
# The base root's packages: systemd and the daemons' runtime libraries (a
# daemon that links a new library adds its package here; the cache is per
# list, so a changed list builds a new base).
SD_PKGS=systemd,systemd-sysv,dbus,libzmq5,libprotobuf-c1,libinih1,libjansson4,libmicrohttpd12,libreadline8,procps,iproute2
BASE=${QWEN35_SD_BASE:-/var/tmp/qwen35-sd-base-$(echo "$SD_PKGS" | md5sum | cut -c1-8)}
T0=$(date +%s)

[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
for c in systemd-nspawn debootstrap nsenter; do
    command -v $c >/dev/null || skip "no $c (deploy/install-deps.sh installs systemd-container, debootstrap)"
done
# a private mount namespace: the container's root (an overlay on the cached
# base) is unmounted with this process whatever happens
if [ -z "${Q35_IT_SD_NS:-}" ] && command -v unshare >/dev/null; then
    Q35_IT_SD_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi

W=$(mktemp -d /var/tmp/q35-it-sd-XXXXXX)
ROOT=$W/root
MACHINE=q35it$$
NSPAWN= LEADER= BOOTN=0
log() { echo "[$(( $(date +%s) - T0 ))s] $*" >>"$W/log"; }
log_ok() { log "ok $*"; }
ON_OK=log_ok
dump() {
    [ -n "$LEADER" ] && { echo "--- journal (qwen35 units, this boot)"; NS_T=20 ns journalctl --no-pager -q -b -o short-monotonic -u 'qwen35*' | tail -n 50
                          echo "--- the coordinator"; NS_T=20 ns journalctl --no-pager -q -b -o short-monotonic -u qwen35-coordinator | tail -n 15; }
    echo "--- $W/log"; tail -n 30 "$W/log"
}
ON_FAIL=dump

# --- the container ------------------------------------------------------------
# ns CMD...: run in the container (its PID 1 is systemd), clean environment
ns() {
    timeout "${NS_T:-60}" nsenter --target "$LEADER" --mount --uts --ipc --net --pid --cgroup --root --wd -- \
        /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        SYSTEMD_PAGER=cat SYSTEMD_COLORS=0 TERM=dumb LANG=C.UTF-8 "$@"
}
prop() { ns systemctl show -p "$1" --value "$2"; }
boot() {
    BOOTN=$((BOOTN + 1))
    local nv=() d
    for d in /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools /dev/nvidia[0-9]*; do
        [ -e "$d" ] && nv+=(--bind="$d")
    done
    # the container's PID 1 may raise no hard limit past ours
    ( ulimit -Hn 1048576 2>/dev/null; ulimit -Sn 1048576 2>/dev/null; ulimit -Hl unlimited 2>/dev/null; ulimit -Sl unlimited 2>/dev/null
      exec systemd-nspawn --quiet --boot --directory="$ROOT" --machine="$MACHINE" --register=no \
          --keep-unit --private-network --console=pipe "${nv[@]}" ) </dev/null >"$W/console-$BOOTN.log" 2>&1 &
    NSPAWN=$!
    LEADER=
    local i c
    for i in $(seq 80); do
        for c in $(ps -o pid= --ppid "$NSPAWN" 2>/dev/null); do
            [ "$(cat /proc/$c/comm 2>/dev/null)" = systemd ] && LEADER=$c
        done
        [ -n "$LEADER" ] && break
        kill -0 "$NSPAWN" 2>/dev/null || break
        sleep 0.25
    done
    if [ -z "$LEADER" ]; then
        [ $BOOTN = 1 ] && skip "systemd-nspawn cannot boot a container here: $(tail -n 1 "$W/console-$BOOTN.log")"
        fail "boot $BOOTN: no container init ($(tail -n 3 "$W/console-$BOOTN.log" | tr '\n' ' '))"
    fi
    # the manager's socket first (is-system-running fails at once without it)
    wait_until 60 ns test -S /run/systemd/private || fail "boot $BOOTN: no /run/systemd/private within 60 s"
    local st; st=$(NS_T=90 ns systemctl is-system-running --wait 2>&1)
    log "boot $BOOTN: nspawn $NSPAWN, init $LEADER, $st"
    [ "$st" = running ] || fail "boot $BOOTN: is-system-running says '$st': $(ns systemctl --failed --no-legend --plain | tr '\n' ' ')"
}
poweroff() {
    [ -n "$NSPAWN" ] || return 0
    NS_T=10 ns systemctl poweroff --no-block >/dev/null 2>&1
    local i
    for i in $(seq 120); do kill -0 "$NSPAWN" 2>/dev/null || break; sleep 0.25; done
    if kill -0 "$NSPAWN" 2>/dev/null; then
        log "nspawn $NSPAWN still up 30 s after poweroff: SIGKILL"
        kill -KILL "$NSPAWN" 2>/dev/null; [ -n "$LEADER" ] && kill -KILL "$LEADER" 2>/dev/null
    fi
    wait "$NSPAWN" 2>/dev/null
    NSPAWN= LEADER=
}
cleanup() {
    local rc=$?
    poweroff
    [ -n "$CLIENT" ] && kill "$CLIENT" 2>/dev/null
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else
        mountpoint -q "$ROOT" && umount "$ROOT"
        rm -rf --one-file-system "$W"
    fi
    exit $rc
}
CLIENT=
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- the base root, once (flock: two runs never build it together) -------------
apt_mirror() {
    local m
    m=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | head -n 1)
    [ -n "$m" ] || m=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | head -n 1)
    echo "${m:-http://deb.debian.org/debian}"
}
exec 9>"$BASE.lock"
flock -w 1500 9 || fail "waited 25 min for $BASE.lock"   # exclusive while it may be built
if [ ! -x "$BASE/lib/systemd/systemd" ]; then
    t=$(date +%s)
    rm -rf "$BASE.tmp"
    timeout 1200 debootstrap --variant=minbase \
        --include="$SD_PKGS" \
        bookworm "$BASE.tmp" "${MIRROR:-$(apt_mirror)}" >"$W/debootstrap.log" 2>&1 ||
        { tail -n 5 "$W/debootstrap.log"; fail "debootstrap bookworm from ${MIRROR:-$(apt_mirror)} failed"; }
    ln -sf /dev/null "$BASE.tmp/etc/systemd/system/console-getty.service"
    mv "$BASE.tmp" "$BASE"
    echo "built the cached Debian 12 root $BASE in $(( $(date +%s) - t )) s"
fi
mkdir -p "$W/upper" "$W/work" "$ROOT"
if [ -n "${Q35_IT_SD_NS:-}" ] && mount -t overlay overlay -o "lowerdir=$BASE,upperdir=$W/upper,workdir=$W/work" "$ROOT" 2>/dev/null; then
    flock -s 9   # shared from now on: nobody rebuilds the base under the overlay
else
    cp -a --reflink=auto "$BASE/." "$ROOT" || fail "copy of $BASE"
    flock -u 9
fi

# --- install as an operator would ------------------------------------------------
make -C "$SRC" -s --no-print-directory BUILD="$BUILD" install DESTDIR="$ROOT" PREFIX=/usr/local \
    >"$W/install.log" 2>&1 || { cat "$W/install.log"; fail "make install DESTDIR=$ROOT"; }
WANTS=$ROOT/etc/systemd/system/qwen35.target.wants
UNITS=$(cd "$WANTS" 2>/dev/null && ls | sort | tr '\n' ' ')
case "$UNITS" in *qwen35-coordinator.service*qwen35-stage@0.service*qwen35-stage@1.service*) ;;
    *) fail "make install enabled '$UNITS', want the coordinator and stages 0, 1 (two-die)";; esac
missing=$(chroot "$ROOT" sh -c 'for b in /usr/local/bin/qwen35-*; do ldd "$b"; done' 2>&1 | grep 'not found' | sort -u | tr -s ' \t\n' ' ')
[ -z "$missing" ] || fail "the installed programs need libraries the base root lacks ($missing): add their packages to SD_PKGS"
grep -q '^qwen35:' "$ROOT/etc/group" || fail "make install did not create the group qwen35 (systemd-sysusers)"
ln -sf /dev/null "$ROOT/etc/systemd/system/console-getty.service"
echo q35it >"$ROOT/etc/hostname"
od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$ROOT/etc/machine-id"; echo >>"$ROOT/etc/machine-id"
install -m 0644 "$MODEL" "$ROOT/srv/qwen35/models/tiny-Q8_0.gguf"
install -m 0644 "$GOLDEN/tokens64.txt" "$ROOT/srv/qwen35/tokens64.txt"
WANT=$(tr -s ' \n' ' ' <"$GOLDEN/expect/tiny-Q8_0.greedy.txt" | sed 's/^ *//; s/ *$//')
# the split qwen35-info proposes; CPU, one thread, 4 slots
PLAN=$("$BUILD/bin/qwen35-info" "$MODEL" --plan 2 2>/dev/null | sed -n 's/^#  *stage [0-9]: layers \([0-9]*:[0-9]*\).*/\1/p')
set -- $PLAN
[ $# = 2 ] || fail "qwen35-info --plan 2 printed no 2-stage split"
E=$ROOT/etc/qwen35
for i in 0 1; do
    eval "lr=\${$((i + 1))}"
    sed -i -e 's|^model = .*|model = /srv/qwen35/models/tiny-Q8_0.gguf|' -e "s|^layers = .*|layers = $lr|" \
        -e 's|^backend = .*|backend = cpu\nthreads = 1|' -e '/^device = /d' \
        -e 's|^max-seqs = .*|max-seqs = 4|' -e 's|^max-ctx = .*|max-ctx = 2048|' "$E/stage-$i.conf"
done
sed -i -e 's|^model = .*|model = /srv/qwen35/models/tiny-Q8_0.gguf|' -e 's|^max-seqs = .*|max-seqs = 4|' \
    -e 's|^max-ctx = .*|max-ctx = 2048|' "$E/coordinator.conf"
grep -q '^listen = ipc:///run/qwen35/coordinator.sock$' "$E/coordinator.conf" ||
    fail "the installed coordinator.conf does not listen on qwen35-client's default endpoint"
ok "make install DESTDIR=root: units enabled $UNITS; group qwen35; configs: stages $1 + $2 (qwen35-info --plan 2), cpu"

# --- boot, start as installed --------------------------------------------------------
boot
ok "boot: systemd $(ns systemctl --version | head -n 1 | cut -d' ' -f2) in systemd-nspawn, running"
SINCE_CLEAN=$(ns date '+%Y-%m-%d %H:%M:%S')
t1=$(date +%s.%N)
NS_T=150 ns systemctl start qwen35.target >>"$W/log" 2>&1 || fail "systemctl start qwen35.target failed"
dt=$(awk -v a="$t1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
for u in $UNITS; do
    [ "$(prop ActiveState "$u")" = active ] || fail "$u is $(prop ActiveState "$u") after systemctl start qwen35.target"
done
[ -z "$(ls "$ROOT"/etc/systemd/system/qwen35*.d 2>/dev/null)" ] || fail "drop-ins present before the as-installed checks"
ok "systemctl start qwen35.target: $UNITS active in ${dt} s (units as installed, no drop-in)"

# READY=1 only after load and bind: systemd's "Started" follows the daemon's line
ready_line() {
    case $1 in qwen35-stage@*) echo '^serving layers';; qwen35-coordinator*) echo '^listening on';;
               qwen35-http*) echo '^the coordinator answers';; *) echo '.';; esac
}
det=
for u in $UNITS; do
    [ "$(prop Type "$u")/$(prop NotifyAccess "$u")" = notify/main ] || fail "$u: Type=$(prop Type "$u") NotifyAccess=$(prop NotifyAccess "$u")"
    j=$(ns journalctl --no-pager -q -b -o cat -u "$u")
    r=$(printf '%s\n' "$j" | grep -n -m1 -E "$(ready_line "$u")" | cut -d: -f1)
    s=$(printf '%s\n' "$j" | grep -n -m1 "^Started " | cut -d: -f1)
    [ -n "$r" ] && [ -n "$s" ] && [ "$s" -gt "$r" ] || fail "$u: 'Started' (line ${s:-none}) not after '$(ready_line "$u")' (line ${r:-none})"
    det="$det ${u%.service}: line $r < Started $s;"
done
ok "ready: Type=notify, systemd's 'Started' after the daemon's ready line:$det"

up2() { prop StatusText qwen35-coordinator.service | grep -q '^2/2 stages up'; }
wait_until 20 up2 || fail "coordinator STATUS '$(prop StatusText qwen35-coordinator.service)', want 2/2 stages up"
s0=$(prop StatusText qwen35-stage@0.service); s1=$(prop StatusText qwen35-stage@1.service)
case "$s0|$s1" in serving*\|serving*) ;; *) fail "stage STATUS '$s0' | '$s1'";; esac
ok "STATUS: stage@0 '$s0' | stage@1 '$s1' | coordinator '$(prop StatusText qwen35-coordinator.service)'"
ns systemctl status --no-pager qwen35-coordinator.service | grep -q 'Status: "2/2 stages up' ||
    fail "systemctl status shows no Status: line for the coordinator"

# A request through the installed client, no endpoint flag (its default is
# the installed coordinator.conf's listen address)
golden() {
    local got
    got=$(NS_T=40 ns qwen35-client --prompt-ids /srv/qwen35/tokens64.txt -n 16 --ignore-eos --ids --timeout 20000 2>>"$W/log" |
          tr -s ' \n' ' ' | sed 's/^ *//; s/ *$//')
    log "request ($1): got [$got] want [$WANT]"
    [ -n "$got" ] && [ "$got" = "$WANT" ]
}
golden first || fail "qwen35-client (default endpoint) did not return the golden greedy ids"
hi=$(NS_T=30 ns qwen35-client -n 8 hi 2>&1) || fail "qwen35-client -n 8 hi: $hi"
perm=$(ns stat -c '%A uid %u group %G' /run/qwen35/coordinator.sock) && dperm=$(ns stat -c '%A %G' /run/qwen35)
GID=$(sed -n 's/^qwen35:[^:]*:\([0-9]*\):.*/\1/p' "$ROOT/etc/group")
member=$(NS_T=30 ns setpriv --reuid=65534 --regid=65534 --groups="$GID" qwen35-client --prompt-ids /srv/qwen35/tokens64.txt -n 4 --ids 2>&1) ||
    fail "a member of group qwen35 (uid 65534) cannot use the socket ($perm): $member"
other=$(NS_T=30 ns setpriv --reuid=65534 --regid=65534 --clear-groups qwen35-client --connect-timeout 1000 -n 1 hi 2>&1) &&
    fail "uid 65534 outside group qwen35 was served through $perm"
ok "request: qwen35-client with no endpoint flag == golden greedy ids; 'qwen35-client hi' rc 0; /run/qwen35 $dperm, coordinator.sock $perm: group member served, others refused"

# effective limits: logged when lower than the units ask
P0=$(prop MainPID qwen35-stage@0.service)
nf=$(ns awk '/Max open files/ { print $4 }' /proc/$P0/limits); ml=$(ns awk '/Max locked memory/ { print $4 }' /proc/$P0/limits)
line=$(ns journalctl --no-pager -q -b -o cat -u qwen35-stage@0.service | grep -m1 'resource limits lower than')
if [ "$nf" -ge 65536 ] && [ "$ml" = unlimited ]; then
    [ -z "$line" ] || fail "limits as asked (nofile $nf, memlock $ml), yet logged: $line"
    ok "limits: stage@0 nofile $nf, memlock $ml, as the unit asks; nothing logged"
else
    case "$line" in *"RLIMIT_NOFILE $nf "*|*"RLIMIT_MEMLOCK $ml "*) ;; *) fail "limits clamped (nofile $nf, memlock $ml) but the stage logged '$line'";; esac
    ok "limits: clamped here (nofile $nf, memlock $ml); stage@0 logged: $line"
fi

sec=
for u in $UNITS; do
    out=$(ns systemd-analyze security --no-pager --threshold=40 "$u" 2>&1) || fail "$u: live exposure above 4.0: $(echo "$out" | tail -n 1)"
    sec="$sec ${u%.service} $(echo "$out" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')"
done
ok "systemd-analyze security (live, in the container):$sec"

if ls /dev/nvidiactl /dev/nvidia[0-9]* >/dev/null 2>&1; then
    seen=$(ns nsenter -t "$P0" -m sh -c 'ls /dev/nvidia*' | tr '\n' ' ')
    case "$seen" in */dev/nvidiactl*) ok "GPU nodes in stage@0's sandbox: $seen";; *) fail "stage@0's sandbox shows '$seen', host has $(ls /dev/nvidia* | tr '\n' ' ')";; esac
else
    echo "$ME: not run: no /dev/nvidia* on this host (the stage sandbox's GPU nodes are checked where they exist)"
fi

# watchdog pings: WatchdogTimestamp advances (every quarter of WatchdogSec=30s)
for u in $UNITS; do eval "WD_${u//[^a-z0-9]/_}=$(prop WatchdogTimestampMonotonic "$u")"; done
WD_T=$(date +%s)

# --- a typo'd config: exit 78, no restart ----------------------------------------
cp "$E/stage-1.conf" "$W/stage-1.conf"
sed -i 's/^layers/layrs/' "$E/stage-1.conf"
NS_T=30 ns systemctl restart qwen35-stage@1.service >/dev/null 2>&1
sleep 6   # past RestartSec=5s
st=$(prop ActiveState qwen35-stage@1.service); ex=$(prop ExecMainStatus qwen35-stage@1.service); nr=$(prop NRestarts qwen35-stage@1.service)
el=$(ns journalctl --no-pager -q -b -o cat -p err -u qwen35-stage@1.service | grep -m1 'layrs')
[ "$st" = failed ] && [ "$ex" = 78 ] && [ "$nr" = 0 ] && [ -n "$el" ] || fail "typo'd config: $st, status $ex, NRestarts $nr, err line '$el'"
ok "typo'd config: $st, exit $ex, NRestarts=$nr; journal (err): $el"
cp "$W/stage-1.conf" "$E/stage-1.conf"
ns systemctl reset-failed qwen35-stage@1.service
NS_T=60 ns systemctl start qwen35-stage@1.service || fail "stage@1 does not start again with its config restored"
wait_until 20 up2 || fail "coordinator not 2/2 after stage@1 came back"

# watchdog pings, checked now (>= 8 s since the first reading)
sleep $(( 8 - ($(date +%s) - WD_T) > 0 ? 8 - ($(date +%s) - WD_T) : 0 ))
det=
for u in $UNITS; do
    [ $u = qwen35-stage@1.service ] && continue   # restarted above
    eval "a=\$WD_${u//[^a-z0-9]/_}"; b=$(prop WatchdogTimestampMonotonic "$u")
    [ "$(prop WatchdogUSec "$u")" = 30s ] && [ "${b:-0}" -gt "${a:-0}" ] || fail "$u: WatchdogTimestamp $a -> $b (WatchdogUSec=$(prop WatchdogUSec "$u"))"
    det="$det ${u%.service} +$(( (b - a) / 1000 )) ms;"
done
ok "watchdog pings: WatchdogSec=30s, WatchdogTimestamp advanced:$det"

# --- kill -9 a stage: Restart=, routed to again -------------------------------------
P1=$(prop MainPID qwen35-stage@1.service); NR=$(prop NRestarts qwen35-stage@1.service)
ns kill -9 "$P1"
back1() { [ "$(prop NRestarts qwen35-stage@1.service)" -gt "$NR" ] && [ "$(prop ActiveState qwen35-stage@1.service)" = active ]; }
wait_until 30 back1 || fail "stage@1 not restarted within 30 s of kill -9 ($(prop ActiveState qwen35-stage@1.service))"
wait_until 30 up2 || fail "coordinator not 2/2 after the restart: '$(prop StatusText qwen35-coordinator.service)'"
golden after-kill9 || fail "no golden answer after stage@1's restart"
ok "kill -9 stage@1 (pid $P1): restarted as pid $(prop MainPID qwen35-stage@1.service) (NRestarts=$(prop NRestarts qwen35-stage@1.service)), coordinator '$(prop StatusText qwen35-coordinator.service)', request == golden"

# --- a hung serving loop: the watchdog kills it, Restart= brings it back -----------
# (test-only drop-in: the hook, and a short watchdog to keep this quick)
D=$ROOT/etc/systemd/system/qwen35-stage@0.service.d
mkdir -p "$D"
printf '[Service]\nEnvironment=QWEN35_TEST_HOOKS=1\nWatchdogSec=4s\n' >"$D/90-test-hang.conf"
ns systemctl daemon-reload
NS_T=60 ns systemctl restart qwen35-stage@0.service || fail "stage@0 does not restart with the test hook"
wait_until 20 up2 || fail "coordinator not 2/2 after stage@0's restart"
P0=$(prop MainPID qwen35-stage@0.service); NR=$(prop NRestarts qwen35-stage@0.service)
ns kill -USR1 "$P0"
t1=$(date +%s)
fired() { ns journalctl --no-pager -q -b -o cat -u qwen35-stage@0.service | grep -q 'Watchdog timeout'; }
wait_until 30 fired || fail "no watchdog timeout within 30 s of hanging stage@0 (WatchdogSec=4s)"
t2=$(date +%s)
back0() { [ "$(prop NRestarts qwen35-stage@0.service)" -gt "$NR" ] && [ "$(prop ActiveState qwen35-stage@0.service)" = active ]; }
wait_until 30 back0 || fail "stage@0 not back within 30 s of the watchdog kill"
rm -f "$D/90-test-hang.conf"; rmdir "$D"
ns systemctl daemon-reload
NS_T=60 ns systemctl restart qwen35-stage@0.service || fail "stage@0 does not restart as installed"
wait_until 20 up2 && golden after-watchdog || fail "no golden answer after the watchdog restart"
ok "hung stage@0 (pid $P0): watchdog fired after $((t2 - t1)) s ($(ns journalctl --no-pager -q -b -o cat -u qwen35-stage@0.service | grep -E 'Watchdog timeout|status=6' | tr '\n' '|')), back as pid $(prop MainPID qwen35-stage@0.service), request == golden"

# --- stop qwen35.target with a long request in flight ---------------------------
drain() {   # drain TAG STOP-ARG: the request in flight finishes; all units end Result=success, exit 0
    local tag=$1 what=$2 n=1900 rc still= u t3
    wait_until 20 up2 || fail "drain $tag: coordinator not 2/2"
    ( NS_T=90 ns qwen35-client --prompt-ids /srv/qwen35/tokens64.txt -n $n --ignore-eos --ids --timeout 60000 \
        >"$W/drain-$tag.out" 2>"$W/drain-$tag.err"; echo "rc=$?" >>"$W/drain-$tag.err" ) &
    CLIENT=$!
    sleep 0.5
    grep -q '^rc=' "$W/drain-$tag.err" && fail "drain $tag: the request ended before the stop: $(cat "$W/drain-$tag.err")"
    t1=$(date +%s.%N)
    set -f; NS_T=90 ns systemctl stop $what; rc=$?; set +f   # a pattern goes to systemctl as is
    t2=$(date +%s.%N)
    for u in $UNITS; do [ "$(prop ActiveState "$u")" = inactive ] || still="$still ${u%.service}=$(prop ActiveState "$u")"; done
    down() { local u; for u in $UNITS; do [ "$(prop ActiveState "$u")" = inactive ] || return 1; done; }
    wait_until 70 down || fail "drain $tag: units still up 70 s after systemctl stop $what"
    t3=$(date +%s.%N)
    wait "$CLIENT"; CLIENT=
    for u in $UNITS; do
        [ "$(prop Result "$u")" = success ] && [ "$(prop ExecMainStatus "$u")" = 0 ] || fail "drain $tag: $u Result=$(prop Result "$u") status $(prop ExecMainStatus "$u")"
    done
    [ $rc = 0 ] || fail "drain $tag: systemctl stop $what: rc $rc"
    [ "$3" = all-down ] && [ -n "$still" ] && fail "drain $tag: systemctl stop $what returned while$still"
    local got; got=$(wc -w <"$W/drain-$tag.out")
    [ "$got" = $n ] && grep -q '^rc=0$' "$W/drain-$tag.err" || fail "drain $tag: the request in flight got $got/$n tokens: $(tr '\n' ' ' <"$W/drain-$tag.err")"
    ok "systemctl stop '$what' ($tag) with a $n-token request in flight: it got all $got tokens, rc 0; stop returned after $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s${still:+ (then up:$still)}, all inactive after $(awk -v a="$t1" -v b="$t3" 'BEGIN { printf "%.1f", b - a }') s, each Result=success, exit 0"
}
# restart of the target: every unit comes back (a new process), the chain serves
restart_target() {
    local u before=() i=0 t1 t2
    for u in $UNITS; do before+=("$(prop MainPID "$u")"); done
    t1=$(date +%s.%N)
    NS_T=150 ns systemctl restart qwen35.target >>"$W/log" 2>&1 || fail "systemctl restart qwen35.target failed"
    t2=$(date +%s.%N)
    for u in $UNITS; do
        [ "$(prop ActiveState "$u")" = active ] || fail "$u is $(prop ActiveState "$u") when systemctl restart qwen35.target returned"
        [ "$(prop MainPID "$u")" != "${before[$i]}" ] || fail "$u: still pid ${before[$i]} after systemctl restart qwen35.target"
        i=$((i + 1))
    done
    wait_until 20 up2 && golden after-restart || fail "no golden answer after systemctl restart qwen35.target"
    ok "systemctl restart qwen35.target: returned after $(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.1f", b - a }') s with $UNITS active again (new pids), request == golden"
}
restart_target
drain first-boot qwen35.target all-down

# the clean phases of boot 1 (start, requests, the drain; the faults above
# log errors on purpose): no line at warning or above from the units
clean_journal() {   # clean_journal TAG SINCE...
    local tag=$1; shift
    local bad; bad=$(ns journalctl --no-pager -q -b -p warning -o cat "$@" -u 'qwen35*' | cat)
    [ -z "$bad" ] || fail "journal ($tag): lines at warning or above: $(echo "$bad" | head -n 5 | tr '\n' '|')"
}
clean_journal "start + requests" --since="$SINCE_CLEAN" --until="$(ns date -d @$WD_T '+%Y-%m-%d %H:%M:%S' 2>/dev/null || echo now)"

# --- enable as the README says, reboot ------------------------------------------------
ns systemctl enable --now qwen35.target >>"$W/log" 2>&1 || fail "systemctl enable --now qwen35.target"
[ "$(ns systemctl is-enabled qwen35.target)" = enabled ] || fail "qwen35.target: $(ns systemctl is-enabled qwen35.target)"
poweroff; boot
for u in $UNITS; do
    [ "$(prop ActiveState "$u")" = active ] || fail "after enable --now qwen35.target + reboot: $u $(prop ActiveState "$u")"
done
wait_until 20 up2 && golden after-reboot || fail "no golden answer after the reboot"
drain after-reboot qwen35.target all-down
clean_journal "boot 2: start, request, drain"
ok "systemctl enable --now qwen35.target + reboot: $UNITS up, request == golden, stop drained; journal: nothing at warning or above in the clean phases"
poweroff
echo "it_systemd_real: $(( $(date +%s) - T0 )) s"
