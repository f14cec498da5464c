# streams4.sh — sourced by the fault tests (tests/it_pipeline_faults.sh,
# it_pipeline_spare.sh) after p35_init: four streams (greedy and seeded,
# prompts of 64, 20, 128 and 5 tokens, $N tokens each) whose outputs are
# compared with their undisturbed runs.
#
#   refs4                 the four undisturbed runs ($T.refI)
#   start4 NAME           the four in the background (pids in $pids)
#   mid_decode NAME       until every stream has delivered 8 tokens
#   wait4 NAME SECONDS    each ends within SECONDS, exit 0, equal to its reference
#   longest_pause FROM    the longest pause a stream saw after line FROM of
#                         the coordinator's log (its "stream resumed" lines)
T=$P35_RUN/t
# long enough that a fault sent once each stream has 8 tokens still finds
# streams running, however late a loaded machine runs the script
N=${N:-320}
ids64 "$T.p64"
head -n 20 "$T.p64" >"$T.p20"
cat "$T.p64" "$T.p64" >"$T.p128"
head -n 5 "$T.p64" >"$T.p5"
# client i: prompt and sampling
args() {
    case $1 in
    1) echo "--prompt-ids $T.p64 --temp 0" ;;
    2) echo "--prompt-ids $T.p20 --temp 0.8 --seed 7" ;;
    3) echo "--prompt-ids $T.p128 --temp 0.7 --top-k 20 --seed 3" ;;
    4) echo "--prompt-ids $T.p5 --temp 1.0 --seed 11 --repeat-penalty 1.1" ;;
    esac
}
since() { echo "$(now) $1" | awk '{ printf "%.1f", $1 - $2 }'; }
nids() { wc -w <"$1" 2>/dev/null || echo 0; }
wait_ids() {   # wait_ids FILE N SECONDS: until FILE holds N ids
    _end=$(( $(date +%s) + $3 ))
    while [ "$(nids "$1")" -lt "$2" ]; do
        [ "$(date +%s)" -ge "$_end" ] && return 1
        sleep 0.05
    done
}
refs4() {
    for i in 1 2 3 4; do
        # shellcheck disable=SC2046
        p35_client $(args $i) -n $N --ignore-eos --ids --timeout 30000 >"$T.ref$i" ||
            fail "reference run $i failed"
        [ "$(nids "$T.ref$i")" -eq $N ] || fail "reference run $i: $(nids "$T.ref$i") tokens, expected $N"
    done
    echo "references: 4 undisturbed runs of $N tokens"
}
start4() {
    pids=""
    for i in 1 2 3 4; do
        # shellcheck disable=SC2046
        p35_bg_client "$T.$1$i" $(args $i) -n $N --ignore-eos --ids --timeout 30000
        pids="$pids $P35_LAST"
    done
}
mid_decode() {
    for i in 1 2 3 4; do
        wait_ids "$T.$1$i" 8 30 || fail "$1: stream $i never started"
    done
}
wait4() {
    i=1
    for p in $pids; do
        _end=$(( $(date +%s) + $2 ))
        while kill -0 "$p" 2>/dev/null && [ "$(date +%s)" -lt "$_end" ]; do sleep 0.1; done
        if kill -0 "$p" 2>/dev/null; then
            fail "$1: client $i still running $2 s after the fault"
            kill -KILL "$p" 2>/dev/null || true
        fi
        rc=0
        wait "$p" || rc=$?
        if [ $rc -ne 0 ]; then
            fail "$1: client $i exited $rc: $(tail -n 2 "$T.$1$i.err" | tr '\n' ' ')"
        elif ! cmp -s "$T.$1$i" "$T.ref$i"; then
            fail "$1: client $i: [$(cat "$T.$1$i")] != undisturbed [$(cat "$T.ref$i")]"
        fi
        i=$((i + 1))
    done
}
longest_pause() {
    tail -n +$(($1 + 1)) "$P35_RUN/coord.log" |
        sed -n 's/.*stream resumed after a \([0-9.]*\) s pause.*/\1/p' | sort -g | tail -n 1
}
