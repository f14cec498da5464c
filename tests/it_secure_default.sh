#!/bin/sh
# Nobody in without a key (issue #25 section 2), real daemons, tiny Q8_0:
# the default install's layout (ipc:// sockets in a directory of mode 0770,
# the daemons at umask 007, as /run/qwen35 and the units have them), tried
# by a second user (uid 65534, no groups, via setpriv) while a greedy stream
# runs:
# - a rogue coordinator with --takeover cannot reach the stages: the stream
#   goes on, never fenced, identical to an undisturbed run;
# - the coordinator's socket refuses that user; a member of the group is served;
# - stage 1 is killed mid-stream and the user binds its socket path in its
#   place: refused (EACCES), never routed to; the real stage returns and the
#   stream is identical;
# - a socket in a directory anyone may write to (as /tmp) warns at start;
# - plaintext TCP without CURVE stops a stage and a coordinator at start
#   (exit 78, naming the line) unless insecure = yes, which warns; the same
#   rogue takes such a stage at once (the control);
# - tcp:// with CURVE: a rogue coordinator with a key of its own is refused,
#   an impostor with a key of its own on a killed stage's port is never
#   routed to (the coordinator pins each stage-key); the stream identical.
# Needs root (to be a second user) and setpriv; skipped (exit 77) otherwise.
set -eu
. "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || skip "needs root (to act as a second user)"
need setpriv
setup
OTHER="setpriv --reuid=65534 --regid=65534 --clear-groups"
# the layout of the install: a socket directory root and its group may use
chmod 0711 "$P35_RUN"
R=$P35_RUN/run
mkdir -m 0770 "$R"
printf '#!/bin/sh\numask 007\nexec "$@"\n' >"$P35_RUN/umask007"
P35_WRAP="sh $P35_RUN/umask007"
P35_STAGE_EP_s0=ipc://$R/s0.sock P35_STAGE_EP_s1=ipc://$R/s1.sock P35_EP=ipc://$R/coord.sock
p35_stage s0 "$M" 0:4 --threads 1 --max-seqs 4 --max-ctx 1024
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 1024
p35_coord "$M" s0 s1 -- --max-seqs 4 --max-ctx 1024
p35_wait_ready 30
perm=$(stat -c '%A' "$R/s0.sock") dperm=$(stat -c '%A' "$R")
[ "$perm" = srwxrwx--- ] || fail "stage socket mode $perm, want srwxrwx---"
N=160
p35_client --prompt-ids "$G/tokens64.txt" -n $N --ignore-eos --ids --timeout 30000 >"$P35_RUN/ref.ids" ||
    fail "the undisturbed run failed"

# --- a rogue coordinator taking the stages over, as another user ---------------
p35_bg_client "$P35_RUN/a.out" --prompt-ids "$G/tokens64.txt" -n $N --ignore-eos --ids --timeout 60000
pa=$P35_LAST
sleep 0.3
mkdir -m 0777 "$P35_RUN/rogue"
# rogue NAME SETTLE TRIES COMMAND...: COMMAND, a coordinator listening on
# ipc://$P35_RUN/rogue/NAME.sock (log rogue-NAME.log), SETTLE s, then its
# --status asked up to TRIES times (0.1 s apart) until a stage shows up
# (up=1); then stopped
rogue() {
    _n=$1 _s=$2 _k=$3
    shift 3
    "$@" >"$P35_RUN/rogue-$_n.log" 2>&1 &
    _r=$!
    sleep "$_s"
    up=0
    for _ in $(seq 1 "$_k"); do
        if "$BIN/qwen35-client" --endpoint "ipc://$P35_RUN/rogue/$_n.sock" --status --json --timeout 1000 2>/dev/null |
            grep -q '"up":true'; then up=1; break; fi
        sleep 0.1
    done
    kill -TERM $_r 2>/dev/null || true
    wait $_r 2>/dev/null || true
}
rogue c 0 40 $OTHER "$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/rogue/c.sock" \
    --stage "ipc://$R/s0.sock 0:4" --stage "ipc://$R/s1.sock 4:8" --max-seqs 4 --max-ctx 1024 --takeover
[ $up = 0 ] || fail "the rogue coordinator (uid 65534) reached a stage"
rc=0
wait $pa || rc=$?
[ $rc = 0 ] || fail "the stream during the rogue takeover failed (rc $rc): $(tail -c 300 "$P35_RUN/a.out")"
cmp -s "$P35_RUN/ref.ids" "$P35_RUN/a.out" || fail "the stream during the rogue takeover differs from the undisturbed run"
grep -q "not the owner" "$P35_RUN/coord.log" && fail "the real coordinator was fenced out: $(grep 'not the owner' "$P35_RUN/coord.log" | head -n 1)"
ok "rogue --takeover as uid 65534: no stage reached (sockets $perm in a $dperm directory), the stream identical ($N tokens), never fenced"

# --- the coordinator's socket: refused to that user, served to the group --------
$OTHER "$BIN/qwen35-client" --endpoint "$P35_EP" --status --timeout 1500 >"$P35_RUN/o.txt" 2>&1 &&
    fail "uid 65534 outside the group got the coordinator's status: $(head -c 200 "$P35_RUN/o.txt")"
setpriv --reuid=65534 --regid=65534 --groups=0 "$BIN/qwen35-client" --endpoint "$P35_EP" --status --timeout 3000 \
    >"$P35_RUN/m.txt" 2>&1 || fail "a member of the socket's group is not served: $(head -c 200 "$P35_RUN/m.txt")"
ok "the coordinator's socket: uid 65534 refused ($(head -n 1 "$P35_RUN/o.txt" | cut -c 1-100)), a member of its group served"

# --- a crashed stage's socket taken by another user ----------------------------
p35_bg_client "$P35_RUN/b.out" --prompt-ids "$G/tokens64.txt" -n $N --ignore-eos --ids --timeout 60000
pb=$P35_LAST
sleep 0.5
p35_kill s1 KILL
hrc=0
$OTHER "$BIN/qwen35-stage" --model "$M" --layers 4:8 --bind "ipc://$R/s1.sock" --threads 1 --max-seqs 4 \
    --max-ctx 1024 >"$P35_RUN/hijack.log" 2>&1 || hrc=$?
[ $hrc != 0 ] || fail "uid 65534 served the stopped stage's socket"
grep -qi "permission denied" "$P35_RUN/hijack.log" || fail "the hijack failed for another reason: $(tail -n 2 "$P35_RUN/hijack.log")"
p35_stage s1 "$M" 4:8 --threads 1 --max-seqs 4 --max-ctx 1024
rc=0
wait $pb || rc=$?
[ $rc = 0 ] || fail "the stream across the stage kill failed (rc $rc): $(tail -c 300 "$P35_RUN/b.out")"
cmp -s "$P35_RUN/ref.ids" "$P35_RUN/b.out" || fail "the stream across the kill and the hijack attempt differs from the undisturbed run"
ok "stage 1 killed, uid 65534 binding its socket: exit $hrc, '$(grep -io 'permission denied' "$P35_RUN/hijack.log" | head -n 1)'; the real stage back, the stream identical"

# --- a socket in a directory anyone may write to: said at start -----------------
grep -q "writable by any local user" "$P35_RUN/s0.log" "$P35_RUN/coord.log" &&
    fail "a WARN on the private socket directory: $(grep -h 'writable by any' "$P35_RUN/s0.log" "$P35_RUN/coord.log")"
mkdir -m 1777 "$P35_RUN/pub"
P35_STAGE_EP_p0=ipc://$P35_RUN/pub/p0.sock
p35_stage p0 "$M" 0:8 --threads 1 --max-seqs 1 --max-ctx 64
wait_for "$P35_RUN/p0.log" "pub (mode 1777) is writable by any local user" 30 ||
    fail "a stage in a world-writable directory: no WARN: $(tail -n 2 "$P35_RUN/p0.log")"
p35_kill p0 TERM
ok "a stage socket in a world-writable (sticky) directory: WARN at start; none for the 0770 one"

# --- plaintext TCP: only by name -------------------------------------------------
printf '[stage]\nmodel = %s\nlayers = 0:4\nbind = tcp://127.0.0.1:1\n' "$M" >"$P35_RUN/tcp.conf"
rc=0
"$BIN/qwen35-stage" --config "$P35_RUN/tcp.conf" >"$P35_RUN/tcp.log" 2>&1 || rc=$?
[ $rc = 78 ] && grep -q "tcp.conf:4: bind: tcp://127.0.0.1:1 is plaintext TCP without curve-secret-key" "$P35_RUN/tcp.log" ||
    fail "a plaintext tcp:// stage: exit $rc: $(tail -n 1 "$P35_RUN/tcp.log")"
printf '[coordinator]\nmodel = %s\nlisten = ipc://%s/c2.sock\nstage = tcp://127.0.0.1:1 0:8\n' "$M" "$P35_RUN" >"$P35_RUN/ctcp.conf"
rc=0
"$BIN/qwen35-coordinator" --config "$P35_RUN/ctcp.conf" >"$P35_RUN/ctcp.log" 2>&1 || rc=$?
[ $rc = 78 ] && grep -q "ctcp.conf:4: stage: tcp://127.0.0.1:1 is plaintext TCP" "$P35_RUN/ctcp.log" ||
    fail "a coordinator with a plaintext tcp:// stage: exit $rc: $(tail -n 1 "$P35_RUN/ctcp.log")"
echo "insecure = yes" >>"$P35_RUN/ctcp.conf"
"$BIN/qwen35-coordinator" --config "$P35_RUN/ctcp.conf" >"$P35_RUN/ctcp2.log" 2>&1 &
pc=$!
wait_for "$P35_RUN/ctcp2.log" "WARN: INSECURE" 10 || fail "insecure = yes: no WARN line: $(tail -n 2 "$P35_RUN/ctcp2.log")"
st=$("$BIN/qwen35-client" --endpoint "ipc://$P35_RUN/c2.sock" --status --json --timeout 3000 2>&1) || true
printf '%s' "$st" | grep -q 'INSECURE' || fail "insecure = yes: not in --status: $(printf '%s' "$st" | head -c 300)"
kill -TERM $pc
wait $pc || true
ok "plaintext tcp:// without CURVE: stage and coordinator exit 78 naming the line; insecure = yes: WARN at start and in --status"

# --- the control: what the rogue does to a plaintext TCP stage (insecure = yes)
# (the installed configs were this before: tcp://127.0.0.1:5701, no CURVE)
set -- $(free_ports 3)   # the tcp stage here, then the two CURVE stages below
PORT=$1
P35_STAGE_EP_t0=tcp://127.0.0.1:$PORT      # p35_stage adds --insecure for tcp://
p35_stage t0 "$M" 0:8 --threads 1 --max-seqs 2 --max-ctx 256
wait_for "$P35_RUN/t0.log" "serving" 30 || fail "the tcp stage did not start: $(tail -n 2 "$P35_RUN/t0.log")"
grep -q "WARN: INSECURE" "$P35_RUN/t0.log" || fail "a stage with insecure = yes: no WARN line"
rogue c3 0 100 $OTHER "$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/rogue/c3.sock" --insecure \
    --stage "tcp://127.0.0.1:$PORT 0:8" --max-seqs 2 --max-ctx 256 --takeover
[ $up = 1 ] || fail "control: the same rogue as uid 65534 did not take a plaintext TCP stage (the checks above prove nothing)"
ok "control: the same rogue as uid 65534 takes a plaintext tcp:// stage (insecure = yes) at once"

p35_kill t0 KILL

# --- between hosts: tcp:// with CURVE -------------------------------------------
# A rogue coordinator with a key of its own (--takeover) is refused by the
# stages' allow-list; an impostor stage with a key of its own on a killed
# stage's port is refused by the coordinator's pinned stage-key. The stream
# goes on, identical.
p35_kill coord TERM
p35_kill s0 TERM
p35_kill s1 TERM
P35_NAMES=""                       # all stopped: only the new ones are watched
K=$P35_RUN/keys
mkdir "$K"
for n in c0 c1 coord rogue impostor; do "$BIN/qwen35-keygen" "$K/$n" >/dev/null; done
cat "$K/coord.pub" >"$K/clients"
P0=$2 P1=$3
P35_STAGE_EP_c0=tcp://127.0.0.1:$P0 P35_STAGE_EP_c1=tcp://127.0.0.1:$P1
cstage() { p35_stage "$1" "$M" "$2" --threads 1 --max-seqs 4 --max-ctx 1024 \
               --curve-secret-key "$K/$1.key" --curve-clients "$K/clients"; }
cstage c0 0:4
cstage c1 4:8
P35_EP=ipc://$R/coord2.sock
p35_coord "$M" c0 c1 -- --max-seqs 4 --max-ctx 1024 --curve-secret-key "$K/coord.key" \
    --stage-key "$K/c0.pub" --stage-key "$K/c1.pub"
p35_wait_ready 30
grep -q INSECURE "$P35_RUN/c0.log" "$P35_RUN/coord.log" && fail "CURVE over tcp:// logged INSECURE"
p35_bg_client "$P35_RUN/c.out" --prompt-ids "$G/tokens64.txt" -n $N --ignore-eos --ids --timeout 60000
pc=$P35_LAST
sleep 0.3
rogue c4 2 1 "$BIN/qwen35-coordinator" --model "$M" --listen "ipc://$P35_RUN/rogue/c4.sock" --max-seqs 4 --max-ctx 1024 \
    --stage "tcp://127.0.0.1:$P0 0:4" --stage "tcp://127.0.0.1:$P1 4:8" --takeover \
    --curve-secret-key "$K/rogue.key" --stage-key "$K/c0.pub" --stage-key "$K/c1.pub"
[ $up = 0 ] || fail "a rogue coordinator with an unlisted key reached a CURVE stage"
grep -qF "refused client key $(cat "$K/rogue.pub")" "$P35_RUN/c0.log" || fail "the stage did not log the rogue's key: $(grep CURVE "$P35_RUN/c0.log" | tail -n 1)"
# then stage 1 dies and an impostor takes its port
p35_kill c1 KILL
"$BIN/qwen35-stage" --model "$M" --layers 4:8 --bind "tcp://127.0.0.1:$P1" --threads 1 --max-seqs 4 --max-ctx 1024 \
    --curve-secret-key "$K/impostor.key" --curve-clients "$K/clients" >"$P35_RUN/impostor.log" 2>&1 &
imp=$!
sleep 3
st=$(p35_client --status --json --timeout 2000 2>/dev/null) || st=""
printf '%s' "$st" | sed 's/"spares":.*//' | grep -q "\"endpoint\":\"tcp://127.0.0.1:$P1\",[^}]*\"up\":true" &&
    fail "the coordinator routes to the impostor on stage 1's port: $st"
kill -TERM $imp 2>/dev/null || true
wait $imp 2>/dev/null || true
cstage c1 4:8
rc=0
wait $pc || rc=$?
[ $rc = 0 ] || fail "the CURVE stream failed (rc $rc): $(tail -c 300 "$P35_RUN/c.out.err")"
cmp -s "$P35_RUN/ref.ids" "$P35_RUN/c.out" || fail "the CURVE stream across the rogue and the impostor differs from the undisturbed run"
grep -q "not the owner" "$P35_RUN/coord.log" && fail "the CURVE coordinator was fenced out"
ok "CURVE over tcp://: a rogue --takeover with its own key refused (logged by the stage), an impostor on a killed stage's port never routed to (pinned stage-key); the stream identical"
ok "nobody in without a key"
