# tests/lib.sh — sourced first by every tests/it_*.sh:
#
#   . "$(dirname "$0")/lib.sh"
#   setup [PROGRAM...]          temp dir $T (= $P35_RUN), cleanup on exit;
#                               fails unless $BIN/PROGRAM... are built
#   need node curl              skip (exit 77) unless these commands exist
#   pipe2 SEQS CTX [coord opts] 2 stages of the tiny model + a coordinator, ready
#   http_front NAME [opts]      qwen35-http on the coordinator: $PORT, $U
#   wait_for FILE PATTERN S     until FILE has a line matching PATTERN
#   free_ports N                N consecutive free TCP ports
#   fail "message"              FAIL: it_x: message (stderr), exit 1
#   ok "message"                ok   it_x: message
#   skip "what is missing"      skip: it_x: ..., exit 77 (tests/run.sh: skipped)
#
# The pipeline helpers (p35_stage, p35_coord, p35_wait_ready, p35_client,
# p35_kill, p35_field ...) come from client/pipeline.sh, sourced here.
# Every time a script waits for is scaled by QWEN35_TIME_SCALE (tests/
# loaded.sh sets it; p35_scale N prints N times it, rounded up): wait_for
# and wait_until scale their SECONDS themselves.
# Set here: ME (the script's name), BUILD, BIN, G (the golden data), M (the
# tiny Q8_0 model), MODEL (the same), TC (qwen35-test-client); by setup:
# T, GOLD (the tiny model's golden greedy ids, one line).

ME=$(basename "$0" .sh)
P35_ME=$ME
cd "$(dirname "$0")/.." || exit 1
BUILD=${QWEN35_BUILD:-build}
BIN=$BUILD/bin
G=${QWEN35_GOLDEN:-$(cd .. && pwd)/shared/golden}
M=$G/models/tiny-Q8_0.gguf
MODEL=$M
TC=$BIN/qwen35-test-client
. client/pipeline.sh

# fail MESSAGE: the one failure style. Also leaves a mark, so that a
# failure inside a subshell or a pipeline still fails the script.
# ON_FAIL / ON_OK: a command a script wants run with the message first
# (e.g. dump its container's journal).
fail() {
    echo "FAIL: $ME: $*" >&2
    [ -n "${P35_RUN:-}" ] && : >"$P35_RUN/.failed"
    ${ON_FAIL:-:} "$*"
    exit 1
}
ok() {
    echo "ok   $ME: $*"
    ${ON_OK:-:} "$*"
}
skip() {
    echo "skip: $ME: $*"
    exit 77
}
# client/pipeline.sh's own failures (p35_wait_ready, p35_init) end the same way
p35_die() { fail "$@"; }

# need CMD...: skip without one of them, except under CI=true where the
# deps script installs them (there a missing one is a failure).
need() {
    for _l_c in "$@"; do
        command -v "$_l_c" >/dev/null 2>&1 && continue
        [ "${CI:-}" = true ] && fail "CI=true but $_l_c missing (make deps installs it)"
        skip "$_l_c not installed (make deps installs it)"
    done
}

# setup: the temp dir $T, removed on exit; every process registered (the
# pipeline's, track's) is stopped first: TERM, KILL after 5 s; then every
# other background job of the script (bg, p35_bg_client, plain &) is
# killed. On a failure the tails of its *.log and *.err files go to stderr.
setup() {
    have "$@"
    p35_init
    GOLD=$(golden_greedy)
    T=$P35_RUN
    trap lib_cleanup EXIT
}
lib_cleanup() {
    _l_rc=$?
    set +e
    trap - EXIT INT TERM HUP
    [ -e "$P35_RUN/.failed" ] && [ "$_l_rc" -eq 0 ] && _l_rc=1
    for _l_p in $P35_CLIENTS; do kill -CONT "$_l_p" 2>/dev/null; kill -KILL "$_l_p" 2>/dev/null; done
    for _l_n in $P35_NAMES; do   # a stopped one (SIGSTOP) could not act on TERM
        eval "_l_p=\${P35_PID_$_l_n:-}"
        [ -n "$_l_p" ] && kill -CONT "$_l_p" 2>/dev/null
    done
    p35_stop
    # whatever else the script left running in the background
    jobs -p >"$P35_RUN/.jobs" 2>/dev/null
    for _l_p in $P35_CLIENTS $(cat "$P35_RUN/.jobs"); do
        kill -CONT "$_l_p" 2>/dev/null; kill -KILL "$_l_p" 2>/dev/null; wait "$_l_p" 2>/dev/null
    done
    if [ "$_l_rc" -ne 0 ] && [ "$_l_rc" -ne 77 ] || [ "$P35_KEEP_LOGS" = 1 ]; then
        for _l_f in "$P35_RUN"/*.log "$P35_RUN"/*.err; do
            [ -s "$_l_f" ] || continue
            echo "--- $(basename "$_l_f") (last lines)" >&2
            tail -n 15 "$_l_f" >&2
        done
    fi
    rm -rf "$P35_RUN"
    exit "$_l_rc"
}

# track NAME PID: a process the script started itself, stopped at exit
# like the pipeline's (TERM, then KILL); its log, if any, $T/NAME.log.
track() {
    eval "P35_PID_$1=\$2"
    case " $P35_NAMES " in *" $1 "*) ;; *) P35_NAMES="$P35_NAMES $1" ;; esac
}

# wait_until SECONDS COMMAND...: until COMMAND succeeds (polled every
# 0.05 s; its output discarded); 1 after SECONDS (scaled).
wait_until() {
    _l_end=$(awk -v a="$(date +%s.%N)" -v s="$(p35_scale "$1")" 'BEGIN { printf "%.2f", a + s }')
    shift
    until "$@" >/dev/null 2>&1; do
        awk -v a="$(date +%s.%N)" -v e="$_l_end" 'BEGIN { exit !(a >= e) }' && return 1
        sleep 0.05
    done
}
wait_for() { wait_until "$3" grep -q -- "$2" "$1"; }

# pipe2 SEQS CTX [coordinator options]: stages s0 (layers 0:4) and s1 (4:8)
# of the tiny model with SEQS slots of CTX tokens, the coordinator with
# those options, ready within READY_S seconds (default 60, scaled).
pipe2() {
    _l_s=$1 _l_x=$2
    shift 2
    p35_stage s0 "$M" 0:4 --threads 1 --max-seqs "$_l_s" --max-ctx "$_l_x"
    p35_stage s1 "$M" 4:8 --threads 1 --max-seqs "$_l_s" --max-ctx "$_l_x"
    p35_coord "$M" s0 s1 -- "$@"
    p35_wait_ready "${READY_S:-60}"
}

# http_front NAME [qwen35-http options]: qwen35-http (HTTP_BIN, default
# $BIN/qwen35-http; under `ulimit $HTTP_ULIMIT` when set) on 127.0.0.1:0
# in front of the coordinator, log $T/NAME.log; once it answers: $PORT
# and $U (its http:// base).
http_front() {
    _l_n=$1
    shift
    : >"$P35_RUN/$_l_n.log"
    sh -c "${HTTP_ULIMIT:+ulimit $HTTP_ULIMIT && }exec \"\$0\" \"\$@\"" "${HTTP_BIN:-$BIN/qwen35-http}" \
        --listen 127.0.0.1:0 --coordinator "$P35_EP" "$@" >>"$P35_RUN/$_l_n.log" 2>&1 &
    track "$_l_n" $!
    wait_for "$P35_RUN/$_l_n.log" "the coordinator answers" 20 ||
        fail "$_l_n did not come up: $(tail -n 3 "$P35_RUN/$_l_n.log")"
    PORT=$(sed -n 's|.*serving http://127.0.0.1:\([0-9]*\)/.*|\1|p' "$P35_RUN/$_l_n.log" | head -n 1)
    U=http://127.0.0.1:$PORT
}

# have NAME...: fail unless $BIN/NAME is built.
have() {
    for _l_b in "$@"; do [ -x "$BIN/$_l_b" ] || fail "$BIN/$_l_b missing (run make first)"; done
}

# under_systemd NAME WATCHDOG_USEC CMD...: CMD run by qwen35-fake-systemd
# (NOTIFY_SOCKET + WATCHDOG_USEC as systemd gives a Type=notify unit), its
# notifications in $T/NAME.log, its stderr in $T/NAME.err; returns once it
# sent READY=1 (fails after 30 s), its pid in $LAST.
under_systemd() {
    _l_n=$1 _l_wd=$2
    shift 2
    "$BIN/qwen35-fake-systemd" "$T/$_l_n.log" "$_l_wd" -- "$@" 2>"$T/$_l_n.err" &
    LAST=$!
    track "$_l_n" "$LAST"
    wait_for "$T/$_l_n.log" '^[0-9.]* READY=1$' 30 || fail "$_l_n: no READY=1 within $(p35_scale 30) s"
}

# free_ports N: N consecutive TCP ports no socket of this machine uses
# now (/proc/net/tcp, tcp6), the first from 20000 + pid % 20000 on, so
# that scripts run side by side (other worktrees' too) pick apart.
free_ports() {
    cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v n="$1" -v start=$((20000 + $$ % 20000)) '
        function hex(s,   v, i) { v = 0; s = toupper(s)
            for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789ABCDEF", substr(s, i, 1)) - 1
            return v }
        $2 ~ /:/ { k = split($2, a, ":"); used[hex(a[k])] = 1 }
        END {
            for (t = 0; t < 40000; t++) {
                p = 20000 + (start - 20000 + t) % 40000
                if (p + n > 60000) continue
                for (i = 0; i < n && !((p + i) in used); i++) ;
                if (i == n) { for (i = 0; i < n; i++) printf "%s%d", i ? " " : "", p + i; print ""; exit }
            }
            exit 1 }'
}

# npm_clients: the node test clients of tests/http (npm-setup.sh) in $NPM
# (QWEN35_NPM_DIR, default $BUILD/npm).
npm_clients() {
    NPM=${QWEN35_NPM_DIR:-$(cd "$BUILD" && pwd)/npm}
    sh tests/http/npm-setup.sh "$NPM" || fail "npm install of the test clients failed"
}

# The golden data in the shapes the scripts feed the client.
golden_greedy() { tr -s ' \n' ' ' <"$G/expect/tiny-Q8_0.greedy.txt" | sed 's/ $//;s/^ //'; }
# ids64 OUT [K]: tokens64.txt one id a line, K times over (default 1).
ids64() {
    tr -s ' \n' '\n' <"$G/tokens64.txt" | grep . >"$1.one"
    _l_i=0
    while [ $_l_i -lt "${2:-1}" ]; do cat "$1.one"; _l_i=$((_l_i + 1)); done >"$1"
    rm -f "$1.one"
}

# Clocks for the figures: now (seconds, fractions), since T0.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# status: the coordinator's --status --json ('{}' when it does not answer)
status() { p35_client --status --json --timeout 5000 2>/dev/null || echo '{}'; }
# held: the requests the coordinator holds (active + queued);
# wait_held N SECONDS: until it holds N (1 after SECONDS, scaled)
held() {
    _l_st=$(status)
    echo $(( $(p35_field "$_l_st" active || echo 0) + $(p35_field "$_l_st" queued || echo 0) ))
}
held_is() { [ "$(held)" -eq "$1" ]; }
wait_held() { wait_until "$2" held_is "$1"; }
