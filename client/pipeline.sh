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
# Variables of these functions start with _p_ so they never clobber the
# caller's.
# BIN: the binaries (default ${QWEN35_BUILD:-build}/bin).
# P35_TCP_PORT: when set, stages bind tcp://127.0.0.1 from this port on
# (one port per stage name, in start order) instead of ipc:// paths
# (plaintext: the stages and the coordinator get --insecure).
# QWEN35_TIME_SCALE: a factor (default 1, e.g. 3 on a loaded machine;
# make test-loaded sets it) for every time limit a test waits: p35_scale N
# prints N times it, rounded up.
# P35_WRAP: a command the stages and the coordinator run under (e.g.
# "chrt -r 10": a benchmark keeps other work on a shared host out of its
# timings); empty: none.

BIN=${BIN:-${QWEN35_BUILD:-build}/bin}
P35_NAMES=""
P35_KEEP_LOGS=${P35_KEEP_LOGS:-0}

p35_scale() {
    awk -v n="$1" -v f="${QWEN35_TIME_SCALE:-1}" 'BEGIN {
        if (f + 0 < 1) f = 1
        v = n * f; r = int(v); if (r < v) r++; print r }'
}

p35_die() {
    echo "$P35_ME: $*" >&2
    exit 1
}

# Stops every process started so far: TERM (the daemons drain and exit),
# KILL whatever is left after 5 s. The temp dir stays.
p35_stop() {
    for _p_n in $P35_NAMES; do
        eval "_p_pid=\${P35_PID_$_p_n:-}"
        if [ -n "$_p_pid" ]; then kill -TERM "$_p_pid" 2>/dev/null || true; fi
    done
    for _p_n in $P35_NAMES; do
        eval "_p_pid=\${P35_PID_$_p_n:-}"
        [ -n "$_p_pid" ] || continue
        _p_i=0
        while kill -0 "$_p_pid" 2>/dev/null && [ $_p_i -lt 50 ]; do sleep 0.1; _p_i=$((_p_i + 1)); done
        if kill -0 "$_p_pid" 2>/dev/null; then
            echo "$P35_ME: $_p_n (pid $_p_pid) ignored SIGTERM for 5 s: killed" >&2
            kill -KILL "$_p_pid" 2>/dev/null || true
        fi
        wait "$_p_pid" 2>/dev/null || true
        eval "P35_PID_$_p_n="
    done
}

# p35_restart_logs: clears the logs between configurations of one script.
p35_clear_logs() {
    for _p_n in $P35_NAMES; do rm -f "$P35_RUN/$_p_n.log"; done
    P35_NAMES=""
}

p35_cleanup() {
    _p_rc=$?
    set +e   # a failing kill or wait must never cut the cleanup short
    trap - EXIT INT TERM HUP
    for _p_j in $P35_CLIENTS; do kill -KILL "$_p_j" 2>/dev/null; done
    p35_stop
    if [ "$_p_rc" -ne 0 ] || [ "$P35_KEEP_LOGS" = 1 ]; then
        for _p_n in $P35_NAMES; do
            [ -s "$P35_RUN/$_p_n.log" ] || continue
            echo "--- $_p_n.log (last lines)" >&2
            tail -n 15 "$P35_RUN/$_p_n.log" >&2
        done
    fi
    [ -n "${P35_RUN:-}" ] && rm -rf "$P35_RUN"
    exit "$_p_rc"
}

p35_init() {
    P35_ME=${P35_ME:-$(basename "$0")}
    for _p_b in qwen35-stage qwen35-coordinator qwen35-client; do
        [ -x "$BIN/$_p_b" ] || p35_die "$BIN/$_p_b missing (run make first)"
    done
    P35_RUN=$(mktemp -d /tmp/q35-pipe-XXXXXX) || p35_die "mktemp failed"
    P35_EP="ipc://$P35_RUN/coord.sock"
    trap p35_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
}

# p35_stage NAME MODEL A:B [options…]   (A:B numeric: the coordinator is told it too)
P35_TCP_NEXT=""
p35_stage() {
    _p_n=$1 _p_m=$2 _p_l=$3
    shift 3
    eval "_p_ep=\${P35_STAGE_EP_$_p_n:-}"
    if [ -z "$_p_ep" ]; then
        if [ -n "${P35_TCP_PORT:-}" ]; then
            P35_TCP_NEXT=${P35_TCP_NEXT:-$P35_TCP_PORT}
            _p_ep="tcp://127.0.0.1:$P35_TCP_NEXT"
            P35_TCP_NEXT=$((P35_TCP_NEXT + 1))
        else
            _p_ep="ipc://$P35_RUN/$_p_n.sock"
        fi
        eval "P35_STAGE_EP_$_p_n=\$_p_ep"
    fi
    case $_p_ep in tcp://*) set -- --insecure "$@" ;; esac
    ${P35_WRAP:-} "$BIN/qwen35-stage" --model "$_p_m" --layers "$_p_l" --bind "$_p_ep" "$@" \
        >>"$P35_RUN/$_p_n.log" 2>&1 &
    eval "P35_PID_$_p_n=\$!; P35_LAYERS_$_p_n=\$_p_l"
    case " $P35_NAMES " in *" $_p_n "*) ;; *) P35_NAMES="$P35_NAMES $_p_n" ;; esac
}

# p35_coord MODEL STAGE-NAMES… [-- coordinator options…]
# --stage takes 'ENDPOINT A:B' or ENDPOINT alone, as this coordinator's
# --help says.
p35_coord() {
    _p_m=$1
    shift
    _p_wr=0
    "$BIN/qwen35-coordinator" --help 2>&1 | grep -q "ENDPOINT A:B" && _p_wr=1
    _p_nargs=$#
    _p_i=0
    _p_inopts=0
    while [ $_p_i -lt $_p_nargs ]; do
        _p_a=$1
        shift
        _p_i=$((_p_i + 1))
        if [ $_p_inopts = 1 ]; then
            set -- "$@" "$_p_a"
        elif [ "$_p_a" = -- ]; then
            _p_inopts=1
        elif [ $_p_wr = 1 ]; then
            eval "_p_l=\$P35_LAYERS_$_p_a; _p_ep=\${P35_STAGE_EP_$_p_a:-ipc://\$P35_RUN/\$_p_a.sock}"
            set -- "$@" --stage "$_p_ep $_p_l"
        else
            eval "_p_ep=\${P35_STAGE_EP_$_p_a:-ipc://\$P35_RUN/\$_p_a.sock}"
            set -- "$@" --stage "$_p_ep"
        fi
    done
    case " $* " in *" tcp://"*|*"--stage tcp://"*) set -- --insecure "$@" ;; esac
    ${P35_WRAP:-} "$BIN/qwen35-coordinator" --model "$_p_m" --listen "$P35_EP" "$@" >>"$P35_RUN/coord.log" 2>&1 &
    P35_PID_coord=$!
    case " $P35_NAMES " in *" coord "*) ;; *) P35_NAMES="$P35_NAMES coord" ;; esac
}

p35_client() {
    "$BIN/qwen35-client" --endpoint "$P35_EP" "$@"
}

# p35_bg_client OUT [client opts…]: a client in the background, stdout in
# OUT, stderr in OUT.err; its _p_pid in $P35_LAST (wait for it to get its
# exit code).
P35_CLIENTS=""
p35_bg_client() {
    _p_out=$1
    shift
    "$BIN/qwen35-client" --endpoint "$P35_EP" "$@" >"$_p_out" 2>"$_p_out.err" &
    P35_LAST=$!
    P35_CLIENTS="$P35_CLIENTS $P35_LAST"
}

# p35_wait_file FILE PATTERN SECONDS: until FILE holds a line matching PATTERN.
p35_wait_file() {   # SECONDS scale with QWEN35_TIME_SCALE (p35_scale)
    _p_tend=$(( $(date +%s) + $(p35_scale "$3") ))
    until grep -q "$2" "$1" 2>/dev/null; do
        [ "$(date +%s)" -ge "$_p_tend" ] && return 1
        sleep 0.05
    done
}

# Waits until the coordinator answers --status with every stage up.
p35_wait_ready() {   # SECONDS scale with QWEN35_TIME_SCALE (p35_scale)
    _p_tend=$(( $(date +%s) + $(p35_scale "${1:-60}") ))
    while :; do
        for _p_n in $P35_NAMES; do
            eval "_p_pid=\${P35_PID_$_p_n:-}"
            kill -0 "$_p_pid" 2>/dev/null || p35_die "$_p_n exited while starting (see its log below)"
        done
        _p_st=$(p35_client --status --json --connect-timeout 300 --timeout 2000 2>/dev/null) || _p_st=""
        if [ -n "$_p_st" ] && ! printf '%s' "$_p_st" | grep -q '"up":false' \
           && printf '%s' "$_p_st" | grep -q '"up":true'; then
            return 0
        fi
        [ "$(date +%s)" -ge "$_p_tend" ] && p35_die "pipeline not ready after ${1:-60} s: $_p_st"
        sleep 0.2
    done
}

# p35_kill NAME [SIGNAL]: signals one process and reaps it (KILL/TERM).
p35_kill() {
    eval "_p_pid=\${P35_PID_$1:-}"
    [ -n "$_p_pid" ] || return 0
    kill "-${2:-KILL}" "$_p_pid" 2>/dev/null || true
    case ${2:-KILL} in
    KILL|TERM) wait "$_p_pid" 2>/dev/null || true; eval "P35_PID_$1=" ;;
    esac
}

# p35_maxdiff A B N: max |a - b| over the first N floats of two f32 files
# ("bad" on NaN/Inf or a file shorter than N); scratch files in $P35_RUN.
p35_maxdiff() {
    od -An -v -f -w4 "$1" | head -n "$3" >"$P35_RUN/a.txt"
    od -An -v -f -w4 "$2" | head -n "$3" >"$P35_RUN/b.txt"
    paste "$P35_RUN/a.txt" "$P35_RUN/b.txt" | awk -v n="$3" '
        $1 ~ /nan|inf/ || $2 ~ /nan|inf/ { bad = 1 }
        { d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d; k++ }
        END { if (bad || k != n) print "bad"; else printf "%.6f\n", m }'
}

# p35_field JSON KEY: the first numeric value of "KEY": in JSON.
p35_field() {
    printf '%s' "$1" | grep -o "\"$2\":[-0-9.e+]*" | head -n 1 | cut -d: -f2
}

# p35_busy_between STATUS0 STATUS1 [busy]: each stage's share of time
# computing between two --status --json snapshots (busy / (busy + idle)),
# and (without "busy") its idle time waiting for work as a share of its
# busy time. The coordinator
# refreshes stage stats about once a second: take the second snapshot a
# little after the work ends.
p35_busy_between() {
    _p_i=1
    _p_out=""
    for _p_b0 in $(printf '%s' "$1" | grep -o '"busy_s":[-0-9.e+]*' | cut -d: -f2); do
        _p_b1=$(printf '%s' "$2" | grep -o '"busy_s":[-0-9.e+]*' | cut -d: -f2 | sed -n "${_p_i}p")
        _p_d0=$(printf '%s' "$1" | grep -o '"idle_s":[-0-9.e+]*' | cut -d: -f2 | sed -n "${_p_i}p")
        _p_d1=$(printf '%s' "$2" | grep -o '"idle_s":[-0-9.e+]*' | cut -d: -f2 | sed -n "${_p_i}p")
        _p_out="$_p_out$(awk -v s=$((_p_i - 1)) -v only="${3:-}" -v b0="$_p_b0" -v b1="$_p_b1" -v i0="$_p_d0" -v i1="$_p_d1" 'BEGIN {
            b = b1 - b0; d = i1 - i0
            if (b <= 0) { printf " stage %d: no work seen;", s; exit }
            if (only == "busy") printf " stage %d: busy %.1f%%;", s, 100 * b / (b + d)
            else printf " stage %d: busy %.1f%%, idle %.1f%% of busy;", s, 100 * b / (b + d), 100 * d / b }')"
        _p_i=$((_p_i + 1))
    done
    echo "$_p_out"
}

# Test verdicts: p35_fail MESSAGE counts a failure and goes on;
# p35_result SUMMARY ends the script (exit 1 when anything failed).
P35_FAILS=0
p35_fail() {
    echo "FAIL: $*" >&2
    P35_FAILS=$((P35_FAILS + 1))
}
p35_result() {
    if [ "$P35_FAILS" -ne 0 ]; then
        echo "$P35_ME: $P35_FAILS failures" >&2
        exit 1
    fi
    echo "$P35_ME: $*"
}

# The benches of a decode stream beside a long prompt (bench_stall.sh,
# bench_prefill_sim.sh). p35_stall_beside SHORT_IDS PROMPT_IDS PIECES TICKS:
# on the pipeline up now, a stream from SHORT_IDS in the background; once
# it has PIECES pieces (or after TICKS tenths of a second) the PROMPT_IDS
# request, timed; then the stream is killed and the pipeline stopped. The
# stream's events in $P35_RUN/b.json, the prompt's in $P35_RUN/a.json, the
# prompt's send and answer times in P35_T0 and P35_T1.
p35_stall_beside() {
    p35_bg_client "$P35_RUN/b.json" --prompt-ids "$1" -n 100000 --ignore-eos --json --timeout 900000 \
        2>/dev/null || true
    _bpid=$P35_LAST
    _i=0
    until [ "$(grep -c '"event":"piece"' "$P35_RUN/b.json" 2>/dev/null)" -ge "$3" ] || [ $_i -ge "$4" ]; do
        sleep 0.1
        _i=$((_i + 1))
    done
    P35_T0=$(date +%s.%N)
    p35_client --prompt-ids "$2" -n 1 --ignore-eos --json --timeout 900000 >"$P35_RUN/a.json" ||
        p35_die "the long prompt beside a decode stream failed"
    P35_T1=$(date +%s.%N)
    kill "$_bpid" 2>/dev/null || true
    wait "$_bpid" 2>/dev/null || true
    p35_stop
}

# p35_stall_report SETUP ST PROMPT_TOKENS ALONE_JSON: the line of
# p35_stall_beside's run: the stream's median gap before the prompt, its
# largest while the prompt was in flight in step targets of ST ms (the
# target, issue #28: <= 2) and how many passed 2, the prompt's TTFT beside
# the stream and alone (ALONE_JSON: its events from a run without it).
p35_stall_report() {
    _ttft() { awk '/"event":"final"/ { s = $0; sub(/.*"ttft_s":/, "", s); printf "%.3f", s + 0 }' "$1"; }
    _med=$(awk -v a="$P35_T0" '/"event":"piece"/ { t = $0; sub(/.*"t":/, "", t); t += 0
                                                   if (n++ && t < a) printf "%.3f\n", (t - last) * 1000; last = t }' \
           "$P35_RUN/b.json" | sort -n | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
    # shellcheck disable=SC2046
    set -- "$@" $(awk -v a="$P35_T0" -v b="$P35_T1" -v st="$2" '/"event":"piece"/ { t = $0; sub(/.*"t":/, "", t); t += 0
                                 if (n++ && last >= a && t <= b) { g = (t - last) * 1000; v[++k] = g; o += g > 2 * st
                                                                   if (g > m) m = g }
                                 last = t }
                                 END { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { x = v[i]; v[i] = v[j]; v[j] = x }
                                       printf "%.1f %d %d %.1f", m, o, k, k ? v[int((k + 1) / 2)] : 0 }' "$P35_RUN/b.json")
    awk -v setup="$1" -v st="$2" -v p="$3" -v tt="$(_ttft "$P35_RUN/a.json")" -v al="$(_ttft "$4")" -v med="$_med" \
        -v mx="$5" -v o="$6" -v k="$7" -v md="$8" 'BEGIN {
        printf "decode beside a %d-token prompt (%s, step target %d ms): gap before %.1f ms, largest while it prefills %.1f ms = %.2f step targets (target <= 2: %s; %d of %d gaps over 2, median %.1f ms); the prompt TTFT %.3f s beside the stream, %.3f s alone\n",
               p, setup, st, med, mx, mx / st, mx <= 2 * st ? "met" : "MISSED", o, k, md, tt, al }'
}

# p35_bench_model: MODEL and N_LAYER for a benchmark on real CPU stages:
# BENCH_MODEL, else the make bench model (mini; tools/bench_preset.sh
# writes it once). Exits 0 when the preset says there is no room for it.
p35_bench_model() {
    if [ -n "${BENCH_MODEL:-}" ]; then
        MODEL=$BENCH_MODEL
    else
        _p_rc=0
        MODEL=$(sh "$(dirname "$0")/../tools/bench_preset.sh" mini "$BIN" "${QWEN35_GOLDEN:-../shared/golden}") || _p_rc=$?
        [ "$_p_rc" -eq 3 ] && exit 0
        [ "$_p_rc" -eq 0 ] || p35_die "no model for the mini preset"
    fi
    [ -f "$MODEL" ] || p35_die "$MODEL: no such model (BENCH_MODEL)"
    N_LAYER=$("$BIN/qwen35-info" "$MODEL" | sed -n 's/^ *layers *\([0-9]*\) main.*/\1/p')
    [ -n "$N_LAYER" ] || p35_die "qwen35-info $MODEL: no layer count"
}
