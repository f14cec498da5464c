#!/bin/sh
# gpu-check.sh — `make gpu-check`: the CUDA backend's verification, for a
# machine with an NVIDIA GPU, its driver and nvcc (no Debian -dev packages,
# no network). Run from the repository root. Under 8 minutes on one H200.
#
#  1. builds the engine, the CUDA backend, qwen35-run, qwen35-mkmodel and
#     qwen35-gpucheck in build-gpu/ (machine code for this GPU only)
#     WITHOUT ZeroMQ / protobuf-c / libsystemd / inih;
#  2. kernels: every decoder bit-exact vs golden/quant, matmul decode and
#     tiled paths vs the exact dot, device top-k vs the host;
#  3. golden: the three golden models through the CUDA backend in several
#     batch shapes and a 2-engine split, max |logit - expected| <= 1e-3 and
#     the greedy continuation identical (on a failure, or GPU_CHECK_LAYERS=1:
#     the residual after every layer, CPU and CUDA, against golden);
#  4. pipeline: with cuda/debs/ carried along (cuda/fetch-debs.sh, run on
#     a build machine), unpacks the .debs with dpkg -x into a local prefix,
#     builds everything, runs test_cuda and a 2-stage pipeline with both
#     stages on this GPU, whose greedy answer must equal the CPU pipeline's;
#  5. bench: decode and prefill on a generated `mini` Q4_K_M model: tokens/s,
#     weight bytes/s as a share of the measured device bandwidth.
#
# Env: GOLDEN (golden data dir; default: the first of ../shared/golden,
# shared/golden, /work/shared/golden that exists), OUT (report dir:
# $OUT/gpu-check.txt), GPU_CHECK_DEVICE (default 0), GPU_CHECK_LAYERS=1,
# GPU_CHECK_SKIP="bench pipeline" (steps to leave out).
# Exit status: 0 when every step that ran passed.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
BUILD=build-gpu
REPORT_DIR=${OUT:-$ROOT/$BUILD}
mkdir -p "$REPORT_DIR" "$BUILD"
REPORT=$REPORT_DIR/gpu-check.txt

if [ -z "${GPU_CHECK_TEED:-}" ]; then           # everything also into the report
    GPU_CHECK_TEED=1 sh "$0" "$@" 2>&1 | tee "$REPORT"
    rc=$(tail -n 1 "$REPORT" | sed -n 's/^gpu-check: exit \([0-9]*\)$/\1/p')
    exit "${rc:-1}"
fi

DEV=${GPU_CHECK_DEVICE:-0}
SKIP=" ${GPU_CHECK_SKIP:-} "
JOBS=$(nproc 2>/dev/null || echo 4)
T0=$(date +%s)
FAILED=""
say() { echo "gpu-check: [$(( $(date +%s) - T0 ))s] $*"; }
step_fail() { FAILED="$FAILED $1"; say "FAILED: $1"; }
finish() {
    say "report in $REPORT"
    if [ -n "$FAILED" ]; then say "failed steps:$FAILED"; echo "gpu-check: exit 1"; exit 1; fi
    say "all steps passed"; echo "gpu-check: exit 0"; exit 0
}

if [ -z "${GOLDEN:-}" ]; then
    for g in ../shared/golden shared/golden ../../shared/golden /work/shared/golden; do
        [ -f "$g/tokens64.txt" ] && { GOLDEN=$(cd "$g" && pwd); break; }
    done
fi
[ -n "${GOLDEN:-}" ] || { say "golden data not found: set GOLDEN=dir"; step_fail golden-data; finish; }
say "golden data: $GOLDEN"

# --- the machine ------------------------------------------------------------
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || { say "nvcc not found"; step_fail nvcc; finish; }
"$NVCC" --version | tail -n 2
CC_CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i "$DEV" 2>/dev/null | tr -d ' .')
ARCHS=${CUDA_ARCHS:-${CC_CAP:-90}}
say "building for sm_$ARCHS with $JOBS jobs"

# --- local prefix from carried .debs ------------------------------------------
HAVE_DEBS=0
if ls cuda/debs/*.deb >/dev/null 2>&1; then
    PREFIX=$ROOT/$BUILD/prefix
    if [ ! -f "$PREFIX/.done" ]; then
        rm -rf "$PREFIX" && mkdir -p "$PREFIX"
        for d in cuda/debs/*.deb; do
            if command -v dpkg >/dev/null; then
                dpkg -x "$d" "$PREFIX" || { say "dpkg -x $d failed"; step_fail debs; }
            else                                   # no dpkg: a .deb is an ar archive
                t=$(mktemp -d) && (cd "$t" && ar x "$ROOT/$d" && tar xf data.tar.* -C "$PREFIX") \
                    || { say "unpacking $d failed"; step_fail debs; }
                rm -rf "$t"
            fi
        done
        touch "$PREFIX/.done"
    fi
    L="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu"
    export CPATH="$PREFIX/usr/include:$PREFIX/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$L${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$PREFIX/usr/bin:$PATH"
    EXTRA_LDFLAGS="-Wl,-rpath-link,$PREFIX/usr/lib/x86_64-linux-gnu -Wl,-rpath-link,$PREFIX/lib/x86_64-linux-gnu"
    HAVE_DEBS=1
    say "daemon libraries from $(ls cuda/debs/*.deb | wc -l) carried .debs in $PREFIX"
else
    EXTRA_LDFLAGS=""
    say "no cuda/debs/: engine-only build (run cuda/fetch-debs.sh on a build machine for the pipeline step)"
fi

# --- 1. build without the daemon libraries ------------------------------------
# PROTO_SRCS= : the tools' objects otherwise wait for protoc-c output they do not use.
MK="make -j$JOBS BUILD=$BUILD CUDA_ARCHS=$ARCHS NVCC=$NVCC"
# LDFLAGS through the environment: the Makefile appends to it.
export LDFLAGS="$EXTRA_LDFLAGS"
if ! $MK PROTO_SRCS= \
        $BUILD/bin/qwen35-gpucheck $BUILD/bin/qwen35-run $BUILD/bin/qwen35-mkmodel; then
    step_fail build; finish
fi
BIN=$ROOT/$BUILD/bin
say "build ok"

# --- 2. kernels ---------------------------------------------------------------
timeout 120 "$BIN/qwen35-gpucheck" --device "$DEV" kernels "$GOLDEN" || step_fail kernels

# --- 3. golden ----------------------------------------------------------------
for m in tiny-Q8_0 tiny-Q4_K_M tiny-Q3_K_M; do
    layers=""
    [ "${GPU_CHECK_LAYERS:-0}" = 1 ] && layers=--layers
    if ! timeout 120 "$BIN/qwen35-gpucheck" --device "$DEV" golden "$GOLDEN" "$GOLDEN/models/$m.gguf" $layers; then
        step_fail "golden-$m"
        [ -z "$layers" ] && timeout 120 "$BIN/qwen35-gpucheck" --device "$DEV" golden "$GOLDEN" \
            "$GOLDEN/models/$m.gguf" --layers | grep '^info'
    fi
done
# qwen35-run through the CUDA backend: the same greedy ids as the golden file.
got=$(timeout 60 "$BIN/qwen35-run" -m "$GOLDEN/models/tiny-Q4_K_M.gguf" --tokens "$GOLDEN/tokens64.txt" \
      --backend cuda -n 16 2>/dev/null | tail -n 1)
exp=$(tr -s ' \n' ' ' < "$GOLDEN/expect/tiny-Q4_K_M.greedy.txt" | sed 's/ $//')
if [ "$(echo $got)" = "$(echo $exp)" ]; then say "qwen35-run --backend cuda greedy: identical to golden"
else say "qwen35-run --backend cuda greedy: got '$got', expected '$exp'"; step_fail run-greedy; fi

# --- 4. pipeline (needs the carried .debs) --------------------------------------
case "$SKIP" in *" pipeline "*) HAVE_DEBS=skip ;; esac
if [ "$HAVE_DEBS" = 1 ]; then
    if $MK bins tests; then
        QWEN35_GOLDEN=$GOLDEN QWEN35_BUILD=$BUILD timeout 120 "$BUILD/tests/test_cuda" || step_fail test_cuda
        say "pipeline: 2 stages on GPU $DEV vs 2 stages on the CPU, greedy answers compared"
        PIPE_OUT=$(mktemp -d /tmp/q35-gpucheck-XXXXXX)
        for be in cpu cuda; do
            BIN=$BIN MODEL=$GOLDEN/models/tiny-Q8_0.gguf BE=$be DEV=$DEV timeout 150 sh -c '
                set -eu
                P35_ME=gpu-check-pipeline
                . client/pipeline.sh
                p35_init
                p35_stage s0 "$MODEL" 0:4 --backend "$BE" --device "$DEV" --max-seqs 2 --max-ctx 256
                p35_stage s1 "$MODEL" 4:8 --backend "$BE" --device "$DEV" --max-seqs 2 --max-ctx 256
                p35_coord "$MODEL" s0 s1 -- --max-seqs 2 --max-ctx 256
                p35_wait_ready 60
                p35_client --temp 0 --ignore-eos -n 24 "Hello from the GPU check"
            ' > "$PIPE_OUT/$be.txt" 2> "$PIPE_OUT/$be.err" || { tail -n 20 "$PIPE_OUT/$be.err"; step_fail "pipeline-$be"; }
        done
        if cmp -s "$PIPE_OUT/cpu.txt" "$PIPE_OUT/cuda.txt" && [ -s "$PIPE_OUT/cuda.txt" ]; then
            say "pipeline: cuda answer identical to cpu ($(wc -c < "$PIPE_OUT/cuda.txt") bytes)"
        else
            say "pipeline: answers differ or empty"; echo "--- cpu"; cat "$PIPE_OUT/cpu.txt"
            echo "--- cuda"; cat "$PIPE_OUT/cuda.txt"; step_fail pipeline-compare
        fi
        rm -rf "$PIPE_OUT"
    else
        step_fail build-all
    fi
elif [ "$HAVE_DEBS" = 0 ]; then
    say "pipeline: skipped (no cuda/debs/)"
fi

# --- 5. bench -----------------------------------------------------------------
case "$SKIP" in *" bench "*) say "bench: skipped"; finish ;; esac
MINI=${GPU_CHECK_MODEL:-/tmp/q35-gpucheck-mini-q4_k_m.gguf}
if [ ! -f "$MINI" ]; then
    say "bench: generating $MINI (mini preset, Q4_K_M)"
    timeout 180 "$BIN/qwen35-mkmodel" --preset mini --types q4_k_m -o "$MINI" || { step_fail mkmodel; finish; }
fi
timeout 180 "$BIN/qwen35-gpucheck" --device "$DEV" bench "$MINI" --decode 128 --prefill 64 || step_fail bench
[ -z "${GPU_CHECK_MODEL:-}" ] && rm -f "$MINI"
finish
