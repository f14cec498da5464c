#!/bin/sh
# Runs the test programs of one build folder and, with "all", the
# integration scripts tests/it_*.sh ("it": the scripts only).
# Usage: tests/run.sh BUILD unit|all|it [it_NAME ...] (names: only those
# scripts). A program or script that exits 77 could not run here (it says
# what is missing in one line): counted as skipped, not as a failure. Ends
# with one line "N passed, N failed, N skipped"; exits non-zero on any
# failure.
BUILD=${1:-build}
WHAT=${2:-all}
shift 2 2>/dev/null || shift $#
ONLY="$*"
export QWEN35_BUILD="$BUILD"
export QWEN35_GOLDEN="${QWEN35_GOLDEN:-$(cd "$(dirname "$0")/../.." && pwd)/shared/golden}"
pass=0; fail=0; skip=0; failed=""
# Each program or script gets at most QWEN35_TEST_LIMIT_S (default 1200 s):
# one that hangs fails with its name instead of eating the CI's time.
LIMIT=${QWEN35_TEST_LIMIT_S:-1200}
run_one() {
    name=$1; shift
    start=$(date +%s)
    rc=0
    timeout -k 10 "$LIMIT" "$@" || rc=$?
    case $rc in
    0) pass=$((pass + 1)); status=ok ;;
    77) skip=$((skip + 1)); status=skip ;;
    *) fail=$((fail + 1)); status=FAILED; failed="$failed $name" ;;
    esac
    [ $(( $(date +%s) - start )) -ge "$LIMIT" ] && status="$status (past the ${LIMIT} s limit)"
    echo "== $name: $status ($(( $(date +%s) - start ))s)"
}
if [ "$WHAT" != it ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        run_one "$(basename "$t")" "$t"
    done
fi
if [ "$WHAT" = all ] || [ "$WHAT" = it ]; then
    for s in tests/it_*.sh; do
        [ -f "$s" ] || continue
        if [ -n "$ONLY" ]; then
            case " $ONLY " in *" $(basename "$s" .sh) "*) ;; *) continue ;; esac
        fi
        run_one "$(basename "$s")" sh "$s"
    done
fi
[ -n "$failed" ] && echo "failed:$failed"
echo "$(basename "$BUILD"): $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
