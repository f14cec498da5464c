# tests/hosts.sh — simulated hosts: sourced after lib.sh's setup (or
# client/pipeline.sh's p35_init) by tests/it_hosts.sh and
# client/bench_hosts.sh. Each "host" is a network namespace joined by a
# veth pair to a switch namespace that routes between them; stages and
# the coordinator run in their own namespaces and reach each other only
# over those links, TCP with CURVE on.
#
#   hosts_init N            host 0 (the coordinator's) and hosts 1..N; skips
#                           (exit 77) without root, ip or tc
#   hosts_stage NAME K MODEL A:B [stage options]
#                           a stage on host K (K = lo: 127.0.0.1, no namespace)
#   hosts_coord MODEL NAMES... [-- options]
#                           the coordinator on host 0 (or loopback when the
#                           stages are), CURVE keys for its stages; a name
#                           after --spare-of is a spare (see below)
#   hosts_link_down K / hosts_link_up K   host K's cable pulled / back
#   hosts_partition K / hosts_heal K      the coordinator and host K no
#                           longer reach each other (each still reaches
#                           the rest)
#   hosts_gone K            host K torn down: its processes killed, its
#                           namespace deleted
#   hosts_wire_bytes K      bytes through host K's link so far (both ways,
#                           IP headers included: what the cable carries)
#
# Links, read by hosts_init (all links) and hosts_stage (the relay):
#   HOSTS_RTT_MS (0.1)      round trip coordinator <-> stage host
#   HOSTS_RATE (10gbit)     every link's rate (tc tbf), both ways
#   HOSTS_JITTER_MS (0)     +- per direction
#   HOSTS_LOSS (0)          per-packet loss, a fraction (0.01 = 1%)
# The delay, jitter and loss come from `tc netem` where this kernel has it
# (HOSTS_MECH=netem), else from qwen35-netrelay in the switch namespace
# (HOSTS_MECH=relay: a userspace TCP relay between the coordinator and
# each stage; loss shows there as retransmit stalls, see tests/netrelay.c).
# HOSTS_FORCE_RELAY=1 takes the relay even with netem. The rate is always
# tbf on both ends of every link.
# Everything is removed at exit, even on failure (the EXIT trap of lib.sh
# / pipeline.sh runs after hosts_down).

HOSTS_RTT_MS=${HOSTS_RTT_MS:-0.1}
HOSTS_RATE=${HOSTS_RATE:-10gbit}
HOSTS_JITTER_MS=${HOSTS_JITTER_MS:-0}
HOSTS_LOSS=${HOSTS_LOSS:-0}
HOSTS_NS=""
HOSTS_PORT=${HOSTS_PORT:-5800}
HOSTS_MECH=""

hosts_skip() {
    if command -v skip >/dev/null 2>&1; then skip "$*"; fi
    echo "skip: ${P35_ME:-hosts}: $*"
    exit 77
}

hosts_ns() { echo "q35-$$-$1"; }

# hosts_exit: the EXIT trap: the daemons stopped (TERM, as the pipeline's
# cleanup would), every namespace's processes killed, the namespaces
# deleted, then the caller's own cleanup with the exit code it had.
hosts_exit() {
    _h_rc=$?
    set +e
    trap - EXIT
    p35_stop 2>/dev/null
    hosts_down
    if command -v lib_cleanup >/dev/null 2>&1; then (exit $_h_rc); lib_cleanup; fi
    (exit $_h_rc)
    p35_cleanup
}

hosts_down() {
    for _h_n in $HOSTS_NS; do
        for _h_p in $(ip netns pids "$_h_n" 2>/dev/null); do kill -KILL "$_h_p" 2>/dev/null; done
    done
    for _h_n in $HOSTS_NS; do ip netns del "$_h_n" 2>/dev/null; done
    HOSTS_NS=""
}

# hosts_on K: the command prefix that runs a program on host K (lo: none).
# A prefix, not a function: "$(hosts_on K) PROG &" leaves $! the program's
# own pid (ip netns exec execs it), which TERM then reaches.
hosts_on() { [ "$1" = lo ] || echo "ip netns exec $(hosts_ns "h$1")"; }

# tbf wants a bucket of at least one tick's bytes at the rate
hosts_tbf() {
    _h_b=$(echo "$HOSTS_RATE" | awk '{ r = $1 + 0; u = tolower($1); sub(/[0-9.]+/, "", u)
        m = u ~ /^g/ ? 1e9 : u ~ /^m/ ? 1e6 : u ~ /^k/ ? 1e3 : 1
        b = r * m / 8 / 250; if (b < 65536) b = 65536; printf "%d", b }')
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$HOSTS_RATE" burst "$_h_b" latency 200ms
}

# hosts_need: skips (exit 77) unless namespaces can be made here; call it
# before work that is wasted without them (hosts_init calls it too)
hosts_need() {
    [ "$(id -u)" = 0 ] || hosts_skip "needs root (network namespaces)"
    command -v ip >/dev/null 2>&1 || hosts_skip "no ip (iproute2)"
    command -v tc >/dev/null 2>&1 || hosts_skip "no tc (iproute2)"
    [ -x "$BIN/qwen35-netrelay" ] && [ -x "$BIN/qwen35-keygen" ] || hosts_skip "$BIN/qwen35-netrelay or qwen35-keygen not built"
    ip netns add "$(hosts_ns probe)" 2>/dev/null || hosts_skip "ip netns add failed (no CAP_SYS_ADMIN here?)"
    ip netns del "$(hosts_ns probe)"
}

hosts_keys() {
    [ -f "$P35_RUN/keys/coord.key" ] && return 0
    mkdir -p "$P35_RUN/keys"
    "$BIN/qwen35-keygen" "$P35_RUN/keys/coord" >/dev/null || p35_die "qwen35-keygen failed"
    cat "$P35_RUN/keys/coord.pub" >"$P35_RUN/keys/clients"
}

hosts_init() {
    hosts_need
    HOSTS_N=$1
    trap hosts_exit EXIT
    HOSTS_NS=""
    _h_sw=$(hosts_ns sw)
    ip netns add "$_h_sw" || p35_die "ip netns add $_h_sw failed"
    HOSTS_NS="$_h_sw"
    ip -n "$_h_sw" link set lo up
    ip netns exec "$_h_sw" sysctl -qw net.ipv4.ip_forward=1
    # netem: tried on the switch's loopback, the kernel says whether it has it
    HOSTS_MECH=relay
    if [ "${HOSTS_FORCE_RELAY:-0}" != 1 ] &&
        ip netns exec "$_h_sw" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
        ip netns exec "$_h_sw" tc qdisc del dev lo root
        HOSTS_MECH=netem
    fi
    _h_k=0
    while [ "$_h_k" -le "$HOSTS_N" ]; do
        _h_n=$(hosts_ns "h$_h_k")
        ip netns add "$_h_n" || p35_die "ip netns add $_h_n failed"
        HOSTS_NS="$HOSTS_NS $_h_n"
        ip -n "$_h_n" link set lo up
        ip link add "q35h$$v$_h_k" netns "$_h_sw" type veth peer name eth0 netns "$_h_n" ||
            p35_die "veth for host $_h_k failed"
        ip -n "$_h_sw" link set "q35h$$v$_h_k" name "v$_h_k"
        ip -n "$_h_sw" addr add "10.30.$_h_k.1/24" dev "v$_h_k"
        ip -n "$_h_n" addr add "10.30.$_h_k.2/24" dev eth0
        ip -n "$_h_sw" link set "v$_h_k" up
        ip -n "$_h_n" link set eth0 up
        ip -n "$_h_n" route add default via "10.30.$_h_k.1"
        hosts_shape "$_h_k"
        _h_k=$((_h_k + 1))
    done
    hosts_keys
    echo "hosts: $HOSTS_N stage hosts + the coordinator's in namespaces $(hosts_ns 'h*'), switch $(hosts_ns sw);" \
        "RTT ${HOSTS_RTT_MS} ms, jitter +-${HOSTS_JITTER_MS} ms, loss ${HOSTS_LOSS} by $(hosts_mech_says), rate $HOSTS_RATE by tbf"
}

hosts_mech_says() {
    case $HOSTS_MECH in
    netem) echo "tc netem on the stage hosts' links" ;;
    *) echo "qwen35-netrelay (no sch_netem in this kernel$([ "${HOSTS_FORCE_RELAY:-0}" = 1 ] && echo ', or HOSTS_FORCE_RELAY=1'))" ;;
    esac
}

# hosts_shape K: tbf on both ends of host K's link; with netem, the stage
# hosts' links also get half the RTT each way (netem's own rate instead of
# tbf: one root qdisc a device).
hosts_shape() {
    _h_sw=$(hosts_ns sw)
    _h_n=$(hosts_ns "h$1")
    if [ "$HOSTS_MECH" = netem ] && [ "$1" != 0 ]; then
        _h_d=$(awk -v r="$HOSTS_RTT_MS" 'BEGIN { printf "%.3fms", r / 2 }')
        _h_j=$(awk -v j="$HOSTS_JITTER_MS" 'BEGIN { printf "%.3fms", j }')
        _h_l=$(awk -v l="$HOSTS_LOSS" 'BEGIN { printf "%.4f%%", 100 * l }')
        for _h_e in "$_h_sw v$1" "$_h_n eth0"; do
            # shellcheck disable=SC2086
            set -- $_h_e
            ip netns exec "$1" tc qdisc replace dev "$2" root netem delay "$_h_d" "$_h_j" loss "$_h_l" \
                rate "$HOSTS_RATE" limit 100000
        done
        return
    fi
    hosts_tbf "$_h_sw" "v$1"
    hosts_tbf "$_h_n" eth0
}

# hosts_stage NAME K MODEL A:B [options]: a stage with its own CURVE key
# on host K; the coordinator will dial P35_STAGE_EP_NAME (the stage, or
# with the relay the relay's port on the switch, which forwards to it).
hosts_stage() {
    _h_name=$1 _h_k=$2 _h_m=$3 _h_l=$4
    shift 4
    eval "_h_port=\${HOSTS_PORT_$_h_name:-}"
    if [ -z "$_h_port" ] && [ "$_h_k" = lo ]; then
        # loopback is shared with whatever else runs here: 16 free ports
        if [ -z "${HOSTS_LO_PORT:-}" ]; then
            HOSTS_LO_PORT=$(free_ports 16 2>/dev/null | cut -d' ' -f1) || HOSTS_LO_PORT=""
            [ -n "$HOSTS_LO_PORT" ] || HOSTS_LO_PORT=$((20000 + $$ % 20000))
        fi
        _h_port=$HOSTS_LO_PORT
        HOSTS_LO_PORT=$((HOSTS_LO_PORT + 1))
        eval "HOSTS_PORT_$_h_name=$_h_port"
    elif [ -z "$_h_port" ]; then
        _h_port=$HOSTS_PORT
        HOSTS_PORT=$((HOSTS_PORT + 1))
        eval "HOSTS_PORT_$_h_name=$_h_port"
    fi
    hosts_keys
    [ -f "$P35_RUN/keys/$_h_name.key" ] || "$BIN/qwen35-keygen" "$P35_RUN/keys/$_h_name" >/dev/null
    if [ "$_h_k" = lo ]; then
        _h_bind=tcp://127.0.0.1:$_h_port
        _h_ep=$_h_bind
    else
        _h_bind=tcp://10.30.$_h_k.2:$_h_port
        _h_ep=$_h_bind
        if [ "$HOSTS_MECH" = relay ]; then
            _h_ep=tcp://10.30.0.1:$_h_port
            _h_ow=$(awk -v r="$HOSTS_RTT_MS" 'BEGIN { printf "%d", r * 500 }')
            _h_j=$(awk -v j="$HOSTS_JITTER_MS" 'BEGIN { printf "%d", j * 1000 }')
            ip netns exec "$(hosts_ns sw)" "$BIN/qwen35-netrelay" --listen "10.30.0.1:$_h_port" \
                --to "10.30.$_h_k.2:$_h_port" --delay-us "$_h_ow" --jitter-us "$_h_j" --loss "$HOSTS_LOSS" \
                --seed "$_h_port" >>"$P35_RUN/r_$_h_name.log" 2>&1 &
            eval "P35_PID_r_$_h_name=\$!"
            case " $P35_NAMES " in *" r_$_h_name "*) ;; *) P35_NAMES="$P35_NAMES r_$_h_name" ;; esac
        fi
    fi
    eval "P35_STAGE_EP_$_h_name=\$_h_ep; P35_LAYERS_$_h_name=\$_h_l; HOSTS_HOST_$_h_name=\$_h_k"
    $(hosts_on "$_h_k") "$BIN/qwen35-stage" --model "$_h_m" --layers "$_h_l" --bind "$_h_bind" \
        --curve-secret-key "$P35_RUN/keys/$_h_name.key" --curve-clients "$P35_RUN/keys/clients" "$@" \
        >>"$P35_RUN/$_h_name.log" 2>&1 &
    eval "P35_PID_$_h_name=\$!"
    case " $P35_NAMES " in *" $_h_name "*) ;; *) P35_NAMES="$P35_NAMES $_h_name" ;; esac
}

# hosts_coord MODEL STAGE... [--spare-of SPARE...] [-- options]: the
# chain's stages in order, then (after --spare-of) spares, each with its
# range; every one with its CURVE key (stage-key / spare-key, in order).
# On host 0, or on loopback when the stages are (hosts_stage NAME lo).
hosts_coord() {
    _h_m=$1
    shift
    _h_nargs=$# _h_i=0 _h_inopts=0 _h_spare=0 _h_where=lo
    while [ $_h_i -lt $_h_nargs ]; do
        _h_a=$1
        shift
        _h_i=$((_h_i + 1))
        if [ $_h_inopts = 1 ]; then
            set -- "$@" "$_h_a"
        elif [ "$_h_a" = -- ]; then
            _h_inopts=1
        elif [ "$_h_a" = --spare-of ]; then
            _h_spare=1
        else
            eval "_h_ep=\$P35_STAGE_EP_$_h_a; _h_l=\$P35_LAYERS_$_h_a; _h_h=\$HOSTS_HOST_$_h_a"
            [ "$_h_h" != lo ] && _h_where=0
            if [ $_h_spare = 0 ]; then
                set -- "$@" --stage "$_h_ep $_h_l" --stage-key "$P35_RUN/keys/$_h_a.pub"
            else
                set -- "$@" --spare "$_h_ep $_h_l" --spare-key "$P35_RUN/keys/$_h_a.pub"
            fi
        fi
    done
    $(hosts_on "$_h_where") "$BIN/qwen35-coordinator" --model "$_h_m" --listen "$P35_EP" \
        --curve-secret-key "$P35_RUN/keys/coord.key" "$@" >>"$P35_RUN/coord.log" 2>&1 &
    P35_PID_coord=$!
    case " $P35_NAMES " in *" coord "*) ;; *) P35_NAMES="$P35_NAMES coord" ;; esac
}

# hosts_link_down K / hosts_link_up K: the switch's end of host K's cable
# down: nothing passes either way (TCP retransmits until it is back).
hosts_link_down() { ip -n "$(hosts_ns sw)" link set "v$1" down; }
hosts_link_up() {
    ip -n "$(hosts_ns sw)" link set "v$1" up
    # the connected route comes back with the link; the address stays
}

# hosts_partition K / hosts_heal K: the coordinator's host and host K stop
# reaching each other, each still reaching the rest. With the relay every
# coordinator-stage byte passes it: the stage's relays hold (SIGUSR1);
# with netem, blackhole routes on the two hosts.
hosts_partition() { hosts_cut "$1" USR1 add; }
hosts_heal() { hosts_cut "$1" USR2 del; }
# hosts_cut K SIGNAL add|del: the relays of host K's stages signalled, or
# the blackhole routes added / deleted
hosts_cut() {
    if [ "$HOSTS_MECH" = relay ]; then
        for _h_n in $P35_NAMES; do
            eval "_h_h=\${HOSTS_HOST_$_h_n:-}; _h_p=\${P35_PID_r_$_h_n:-}"
            [ "$_h_h" = "$1" ] && [ -n "$_h_p" ] && kill "-$2" "$_h_p"
        done
        return 0
    fi
    ip -n "$(hosts_ns h0)" route "$3" blackhole "10.30.$1.0/24"
    ip -n "$(hosts_ns "h$1")" route "$3" blackhole 10.30.0.0/24
}

# hosts_gone K: host K torn down mid-work: its processes SIGKILLed, its
# namespace (and so its link) deleted. Its stages' names stay in
# P35_NAMES with no pid.
hosts_gone() {
    _h_n=$(hosts_ns "h$1")
    for _h_p in $(ip netns pids "$_h_n" 2>/dev/null); do kill -KILL "$_h_p" 2>/dev/null || true; done
    for _h_s in $P35_NAMES; do
        eval "_h_h=\${HOSTS_HOST_$_h_s:-}"
        if [ "$_h_h" = "$1" ]; then
            eval "_h_p=\${P35_PID_$_h_s:-}"
            [ -n "$_h_p" ] && { wait "$_h_p" 2>/dev/null || true; }
            eval "P35_PID_$_h_s="
        fi
    done
    ip netns del "$_h_n"
    HOSTS_NS=$(echo " $HOSTS_NS " | sed "s| $_h_n | |; s|^ *||; s| *\$||")
}

# hosts_wire_bytes K: bytes host K's link carried so far, both ways
# (the switch's end of the cable: rx + tx, IP and TCP headers included)
hosts_wire_bytes() {
    _h_d=/sys/class/net/v$1/statistics
    ip netns exec "$(hosts_ns sw)" sh -c "echo \$(( \$(cat $_h_d/rx_bytes) + \$(cat $_h_d/tx_bytes) ))"
}
