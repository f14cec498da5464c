# pipeline.sh — sourced by `make demo`, `make bench-pipeline` and the
# tests/it_pipeline*.sh scripts: runs stages and a coordinator on ipc://
# endpoints in a private temp dir and stops every process it started when
# the script exits, however it exits (trap).
#
#   . client/pipeline.sh
#   p35_init                              temp dir, traps
#   p35_stage s0 MODEL 0:4 [stage opts]   starts qwen35-stage, endpoint $P35_RUN/s0.sock
#   p35_stage s1 MODEL 4:end
#   p35_coord MODEL s0 s1 [coord opts]    starts qwen35-coordinator on $P35_EP
#   p35_wait_ready [SECONDS]              until --status shows every stage up
#   p35_client [client opts]              qwen35-client --endpoint $P35_EP …
#   p35_kill s0 [SIGNAL]                  one process by its name
#
# Process ids are kept per name (P35_PID_<name>); logs in $P35_RUN/<name>.log.
# BIN: the binaries (default ${QWEN35_BUILD:-build}/bin).

BIN=${BIN:-${QWEN35_BUILD:-build}/bin}
P35_NAMES=""
P35_KEEP_LOGS=${P35_KEEP_LOGS:-0}

p35_die() {
    echo "$P35_ME: $*" >&2
    exit 1
}

# Stops every process started so far: TERM (the daemons drain and exit),
# KILL whatever is left after 5 s. The temp dir stays.
p35_stop() {
    for n in $P35_NAMES; do
        eval "pid=\${P35_PID_$n:-}"
        [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null
    done
    for n in $P35_NAMES; do
        eval "pid=\${P35_PID_$n:-}"
        [ -n "$pid" ] || continue
        i=0
        while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        if kill -0 "$pid" 2>/dev/null; then
            echo "$P35_ME: $n (pid $pid) ignored SIGTERM for 5 s: killed" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null
        eval "P35_PID_$n="
    done
}

# p35_restart_logs: clears the logs between configurations of one script.
p35_clear_logs() {
    for n in $P35_NAMES; do rm -f "$P35_RUN/$n.log"; done
    P35_NAMES=""
}

p35_cleanup() {
    rc=$?
    trap - EXIT INT TERM HUP
    for j in $P35_CLIENTS; do kill -KILL "$j" 2>/dev/null; done
    p35_stop
    if [ "$rc" -ne 0 ] || [ "$P35_KEEP_LOGS" = 1 ]; then
        for n in $P35_NAMES; do
            [ -s "$P35_RUN/$n.log" ] || continue
            echo "--- $n.log (last lines)" >&2
            tail -n 15 "$P35_RUN/$n.log" >&2
        done
    fi
    [ -n "${P35_RUN:-}" ] && rm -rf "$P35_RUN"
    exit "$rc"
}

p35_init() {
    P35_ME=${P35_ME:-$(basename "$0")}
    for b in qwen35-stage qwen35-coordinator qwen35-client; do
        [ -x "$BIN/$b" ] || p35_die "$BIN/$b missing (run make first)"
    done
    P35_RUN=$(mktemp -d /tmp/q35-pipe-XXXXXX) || p35_die "mktemp failed"
    P35_EP="ipc://$P35_RUN/coord.sock"
    trap p35_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}

# p35_stage NAME MODEL A:B [options…]   (A:B numeric: the coordinator is told it too)
p35_stage() {
    n=$1 m=$2 l=$3
    shift 3
    "$BIN/qwen35-stage" --model "$m" --layers "$l" --bind "ipc://$P35_RUN/$n.sock" "$@" \
        >>"$P35_RUN/$n.log" 2>&1 &
    eval "P35_PID_$n=\$!; P35_LAYERS_$n=\$l"
    case " $P35_NAMES " in *" $n "*) ;; *) P35_NAMES="$P35_NAMES $n" ;; esac
}

# p35_coord MODEL STAGE-NAMES… [-- coordinator options…]
# --stage takes 'ENDPOINT A:B' or ENDPOINT alone, as this coordinator's
# --help says.
p35_coord() {
    m=$1
    shift
    with_range=0
    "$BIN/qwen35-coordinator" --help 2>&1 | grep -q "ENDPOINT A:B" && with_range=1
    n_args=$#
    i=0
    in_opts=0
    while [ $i -lt $n_args ]; do
        a=$1
        shift
        i=$((i + 1))
        if [ $in_opts = 1 ]; then
            set -- "$@" "$a"
        elif [ "$a" = -- ]; then
            in_opts=1
        elif [ $with_range = 1 ]; then
            eval "l=\$P35_LAYERS_$a"
            set -- "$@" --stage "ipc://$P35_RUN/$a.sock $l"
        else
            set -- "$@" --stage "ipc://$P35_RUN/$a.sock"
        fi
    done
    "$BIN/qwen35-coordinator" --model "$m" --listen "$P35_EP" "$@" >>"$P35_RUN/coord.log" 2>&1 &
    P35_PID_coord=$!
    case " $P35_NAMES " in *" coord "*) ;; *) P35_NAMES="$P35_NAMES coord" ;; esac
}

p35_client() {
    "$BIN/qwen35-client" --endpoint "$P35_EP" "$@"
}

# p35_bg_client OUT [client opts…]: a client in the background, stdout in
# OUT, stderr in OUT.err; its pid in $P35_LAST (wait for it to get its
# exit code).
P35_CLIENTS=""
p35_bg_client() {
    out=$1
    shift
    "$BIN/qwen35-client" --endpoint "$P35_EP" "$@" >"$out" 2>"$out.err" &
    P35_LAST=$!
    P35_CLIENTS="$P35_CLIENTS $P35_LAST"
}

# p35_wait_file FILE PATTERN SECONDS: until FILE holds a line matching PATTERN.
p35_wait_file() {
    t_end=$(( $(date +%s) + $3 ))
    until grep -q "$2" "$1" 2>/dev/null; do
        [ "$(date +%s)" -ge "$t_end" ] && return 1
        sleep 0.05
    done
}

# Waits until the coordinator answers --status with every stage up.
p35_wait_ready() {
    t_end=$(( $(date +%s) + ${1:-60} ))
    while :; do
        for n in $P35_NAMES; do
            eval "pid=\${P35_PID_$n:-}"
            kill -0 "$pid" 2>/dev/null || p35_die "$n exited while starting (see its log below)"
        done
        st=$(p35_client --status --json --connect-timeout 300 --timeout 2000 2>/dev/null)
        if [ -n "$st" ] && ! printf '%s' "$st" | grep -q '"up":false' \
           && printf '%s' "$st" | grep -q '"up":true'; then
            return 0
        fi
        [ "$(date +%s)" -ge "$t_end" ] && p35_die "pipeline not ready after ${1:-60} s: $st"
        sleep 0.2
    done
}

# p35_kill NAME [SIGNAL]: signals one process and reaps it (KILL/TERM).
p35_kill() {
    eval "pid=\${P35_PID_$1:-}"
    [ -n "$pid" ] || return 0
    kill "-${2:-KILL}" "$pid" 2>/dev/null
    case ${2:-KILL} in
    KILL|TERM) wait "$pid" 2>/dev/null; eval "P35_PID_$1=" ;;
    esac
}

# p35_field JSON KEY: the first numeric value of "KEY": in JSON.
p35_field() {
    printf '%s' "$1" | grep -o "\"$2\":[-0-9.e+]*" | head -n 1 | cut -d: -f2
}
