#!/bin/sh
# gpu-check.sh — `make gpu-check`: the CUDA backend's verification in ONE
# run on a lent GPU machine: nvcc, a driver and a C compiler, but no Debian
# -dev packages and no network. Prepare it here with `make gpu-bundle`
# (gpu-bundle/: the daemon libraries' .debs and a golden subset; carry it
# with the working tree). Run from anywhere; about 4-6 minutes on a
# 16-core machine with one H200.
#
#  1. unpacks gpu-bundle/debs with dpkg -x (or ar + tar) into build-gpu/prefix
#     and points CPATH / LIBRARY_PATH / LD_LIBRARY_PATH / PATH there;
#  2. builds EVERYTHING (daemons, tools, test programs, the CUDA backend for
#     this GPU's sm_XX) in build-gpu/;
#  3. stops here, exit 3, when there is no CUDA device (no driver or no GPU:
#     the dry run of tests/it_gpu_check_dry.sh ends so);
#  4. kernels: every decoder bit-exact vs golden/quant, matmul decode and
#     tiled paths vs the exact dot, device top-k vs the host;
#  5. golden: tiny-Q4_K_M and tiny-Q3_K_M (bundled) through the CUDA
#     backend in several batch shapes and 2-engine splits, max |logit -
#     expected| <= 1e-3, greedy identical, per-layer residuals (attention
#     and SSM layers); tiny-Q8_0 does not fit the bundle: a tiny Q8_0 model
#     is generated here (qwen35-mkmodel) with the CPU backend's logits as its
#     reference; qwen35-run --backend cuda greedy; test_cuda;
#  6. pipeline: two qwen35-stage processes on this one GPU + a coordinator,
#     greedy answer identical to the same pipeline on the CPU;
#  7. bench: decode and prefill on a generated `mini` Q4_K_M model, tokens/s
#     and weight bytes/s as a share of the measured device bandwidth, with
#     CUDA graphs on and off.
# Ends with a one-page summary (also $OUT/gpu-check.txt, the whole log).
#
# Env: GPU_BUNDLE (default gpu-bundle), GOLDEN (default GPU_BUNDLE/golden,
# else ../shared/golden), OUT (report dir, default build-gpu),
# GPU_CHECK_DEVICE (0), CUDA_ARCHS (default: the device's compute
# capability, 90 without one), NVCC, GPU_CHECK_SKIP="bench pipeline".
# Exit: 0 every step passed; 1 a step failed; 3 everything built but no
# CUDA device (nothing on a GPU ran).
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
WORK=$ROOT/$BUILD/check
rm -rf "$WORK" && mkdir -p "$WORK"
SUMMARY=$WORK/summary.txt
: > "$SUMMARY"
say() { echo "gpu-check: [$(( $(date +%s) - T0 ))s] $*"; }
sum() { echo "$*" >> "$SUMMARY"; }
step_fail() { FAILED="$FAILED $1"; say "FAILED: $1"; }
finish() {          # finish [EXIT]: the summary, then the status line
    code=${1:-}
    [ -z "$code" ] && { if [ -n "$FAILED" ]; then code=1; else code=0; fi; }
    echo
    echo "=================== gpu-check summary ($(( $(date +%s) - T0 )) s) ==================="
    cat "$SUMMARY"
    case $code in
    0) echo "result: all steps passed" ;;
    3) echo "result: no CUDA device: everything built, no GPU step ran (exit 3)" ;;
    *) echo "result: FAILED:$FAILED" ;;
    esac
    echo "report: $REPORT"
    echo "gpu-check: exit $code"
    exit "$code"
}

# --- inputs -----------------------------------------------------------------------
BUNDLE=${GPU_BUNDLE:-gpu-bundle}
if [ -z "${GOLDEN:-}" ]; then
    for g in "$BUNDLE/golden" ../shared/golden shared/golden /work/shared/golden; do
        [ -f "$g/tokens64.txt" ] && { GOLDEN=$(cd "$g" && pwd); break; }
    done
fi
[ -n "${GOLDEN:-}" ] || { say "no golden data: make gpu-bundle here first, or GOLDEN=dir"; step_fail golden-data; finish; }
say "golden data: $GOLDEN"
ls "$BUNDLE"/debs/*.deb >/dev/null 2>&1 ||
    { say "no $BUNDLE/debs/*.deb: run 'make gpu-bundle' on a build machine and carry $BUNDLE"; step_fail bundle; finish; }

# --- the machine ------------------------------------------------------------------
HAVE_SMI=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && HAVE_SMI=1
if [ "$HAVE_SMI" = 1 ]; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    sum "machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i "$DEV" 2>/dev/null), $JOBS CPUs"
else
    sum "machine: no nvidia-smi / no GPU listed, $JOBS CPUs"
fi
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { say "nvcc not found (NVCC=path)"; step_fail nvcc; finish; }
NVCC_REL=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
CC_CAP=""
[ "$HAVE_SMI" = 1 ] && CC_CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i "$DEV" 2>/dev/null | tr -d ' .')
ARCHS=${CUDA_ARCHS:-${CC_CAP:-90}}
say "nvcc $NVCC (CUDA $NVCC_REL), building for sm_$ARCHS with $JOBS jobs"

# --- 1. local prefix from the bundled .debs -------------------------------------------
PREFIX=$ROOT/$BUILD/prefix
stamp=$(ls -l "$BUNDLE"/debs/*.deb | cksum | cut -d' ' -f1)
if [ "$(cat "$PREFIX/.done" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$PREFIX" && mkdir -p "$PREFIX"
    for d in "$BUNDLE"/debs/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$d" "$PREFIX" || { say "dpkg-deb -x $d failed"; step_fail debs; }
        else                                   # no dpkg: a .deb is an ar archive
            t=$(mktemp -d) && (cd "$t" && ar x "$ROOT/$d" && tar xf data.tar.* -C "$PREFIX") \
                || { say "unpacking $d failed"; step_fail debs; }
            rm -rf "$t"
        fi
    done
    # absolute symlinks in the .debs (lib.so -> /lib/...) point into the prefix
    find "$PREFIX" -type l | while read -r l; do
        case "$(readlink "$l")" in /*) ln -sfn "$PREFIX$(readlink "$l")" "$l" ;; esac
    done
    echo "$stamp" > "$PREFIX/.done"
fi
[ -n "$FAILED" ] && finish
L="$PREFIX/usr/lib/x86_64-linux-gnu:$PREFIX/lib/x86_64-linux-gnu"
export CPATH="$PREFIX/usr/include:$PREFIX/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}"
export LIBRARY_PATH="$L${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PREFIX/usr/bin:$PATH"
# LDFLAGS through the environment: the Makefile appends to it.
export LDFLAGS="-Wl,-rpath-link,$PREFIX/usr/lib/x86_64-linux-gnu -Wl,-rpath-link,$PREFIX/lib/x86_64-linux-gnu"
say "daemon libraries from $(ls "$BUNDLE"/debs/*.deb | wc -l) bundled .debs in $PREFIX"

# --- 2. build everything ----------------------------------------------------------------
MK="make -j$JOBS --no-print-directory BUILD=$BUILD CUDA_ARCHS=$ARCHS NVCC=$NVCC GOLDEN=$GOLDEN"
tb=$(date +%s)
if ! $MK bins tests > "$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log"; sum "build: FAILED (CUDA $NVCC_REL, sm_$ARCHS; $WORK/build.log)"
    step_fail build; finish
fi
BIN=$ROOT/$BUILD/bin
nb=$(ls "$BIN" | wc -l); nt=$(ls "$BUILD/tests" | wc -l)
sum "build: $nb programs + $nt test programs, CUDA $NVCC_REL for sm_$ARCHS, in $(( $(date +%s) - tb )) s"
say "build ok: $nb programs, $nt test programs ($(ls "$BIN" | tr '\n' ' '))"

# --- 3. a device? ---------------------------------------------------------------------------
if ! "$BIN/qwen35-gpucheck" devices > "$WORK/devices.txt" 2>&1; then
    cat "$WORK/devices.txt"
    sum "device: $(head -n 1 "$WORK/devices.txt")"
    say "no CUDA device: stopping after the build"
    finish 3
fi
cat "$WORK/devices.txt"
sum "device: $(sed -n "s/^device $DEV: //p" "$WORK/devices.txt")"

# --- 4. kernels ---------------------------------------------------------------------------
timeout 120 "$BIN/qwen35-gpucheck" --device "$DEV" kernels "$GOLDEN" > "$WORK/kernels.txt" 2>&1 || step_fail kernels
cat "$WORK/kernels.txt"
sum "kernels vs CPU (decoders bit-exact vs golden/quant; matmul max |gpu - exact| / sum|w x|):"
awk '/dequant/ { t = $3; st[t] = $1; d = $0; sub(/.*\(/, "", d); sub(/ values differ\)/, "", d); dq[t] = d; order[++n] = t }
     /matmul/ { t = $3; e = $NF; if ($1 == "FAIL") st[t] = "FAIL"; if ($4 == "nx=1") m1[t] = e; else mt[t] = e }
     /top-k/ { tk = $1 }
     END { for (i = 1; i <= n; i++) { t = order[i]
             printf "  %-5s %-4s dequant %s differ, matmul decode %s, tiled %s\n", t, st[t], dq[t], m1[t], mt[t] }
           printf "  top-k %s (device vs host, ties to the lower id)\n", tk == "" ? "not run" : tk }' \
    "$WORK/kernels.txt" >> "$SUMMARY"

# --- 5. golden ---------------------------------------------------------------------------------
# tiny-Q8_0: generated here, the CPU backend's logits and greedy ids its
# reference, in a golden-shaped folder beside the bundled files.
GEN=$WORK/golden-gen
mkdir -p "$GEN/models" "$GEN/expect"
for f in tokens64.txt quant; do ln -sfn "$GOLDEN/$f" "$GEN/$f"; done
for f in "$GOLDEN"/models/* "$GOLDEN"/expect/*; do ln -sfn "$f" "$GEN/${f#$GOLDEN/}"; done
Q8=$GEN/models/tiny-Q8_0.gguf
if [ ! -f "$GOLDEN/models/tiny-Q8_0.gguf" ]; then
    rm -f "$Q8"
    if timeout 60 "$BIN/qwen35-mkmodel" --preset tiny --types q8_0 --vocab-from "$GOLDEN/models/tiny-Q4_K_M.gguf" \
            -o "$Q8" > "$WORK/mkq8.txt" 2>&1 &&
       timeout 60 "$BIN/qwen35-run" -m "$Q8" --tokens "$GOLDEN/tokens64.txt" --backend cpu -n 16 \
            --logits-out "$GEN/expect/tiny-Q8_0.logits.f32" 2>> "$WORK/mkq8.txt" | tail -n 1 > "$GEN/expect/tiny-Q8_0.greedy.txt" &&
       [ -s "$GEN/expect/tiny-Q8_0.greedy.txt" ]; then
        Q8_NOTE="generated tiny Q8_0 (qwen35-mkmodel), reference = the CPU backend"
    else
        cat "$WORK/mkq8.txt"; step_fail gen-q8_0; Q8_NOTE=""
    fi
else
    Q8_NOTE="golden"
fi
sum "golden logits through the CUDA backend (max |logit - expected| over all batch shapes and splits; greedy):"
for m in tiny-Q4_K_M tiny-Q3_K_M tiny-Q8_0; do
    [ -f "$GEN/models/$m.gguf" ] || continue
    args="--device $DEV golden $GEN $GEN/models/$m.gguf"
    [ -f "$GEN/expect/$m.layers.f32" ] && args="$args --layers"
    timeout 180 "$BIN/qwen35-gpucheck" $args > "$WORK/golden-$m.txt" 2>&1 || step_fail "golden-$m"
    cat "$WORK/golden-$m.txt"
    note="golden"; [ "$m" = tiny-Q8_0 ] && note=$Q8_NOTE
    awk -v m="$m" -v note="$note" '
        /max \|logit - expected\|/ { n++; v = $0; sub(/.*= /, "", v); sub(/ .*/, "", v); if (v + 0 > w) w = v + 0; if ($1 == "FAIL") f++ }
        /greedy .* identical/ { g = g ($1 == "ok" ? "identical" : "DIFFERENT") }
        /^FAIL/ { bad++ }
        /^info layers cuda/ { l = $6; sub(/:/, "", l); v = $NF; if (l == 3 || l == 7) { if (v + 0 > wa) wa = v + 0 } else if (v + 0 > ws) ws = v + 0 }
        END { printf "  %-12s %-4s max %.2e over %d runs, greedy %s", m, bad ? "FAIL" : "ok", w, n, g == "" ? "not run" : g
              if (ws != "" || wa != "") printf "; residual vs golden: SSM layers %.1e, attention layers %.1e", ws, wa
              printf " (%s)\n", note }' "$WORK/golden-$m.txt" >> "$SUMMARY"
done
got=$(timeout 60 "$BIN/qwen35-run" -m "$GOLDEN/models/tiny-Q4_K_M.gguf" --tokens "$GOLDEN/tokens64.txt" \
      --backend cuda -n 16 2>/dev/null | tail -n 1)
exp=$(tr -s ' \n' ' ' < "$GOLDEN/expect/tiny-Q4_K_M.greedy.txt" | sed 's/ $//')
if [ "$(echo $got)" = "$(echo $exp)" ]; then say "qwen35-run --backend cuda greedy: identical to golden"; r=identical
else say "qwen35-run --backend cuda greedy: got '$got', expected '$exp'"; step_fail run-greedy; r=DIFFERENT; fi
rc=0
QWEN35_GOLDEN=$GEN QWEN35_BUILD=$BUILD timeout 120 "$BUILD/tests/test_cuda" > "$WORK/test_cuda.txt" 2>&1 || rc=$?
cat "$WORK/test_cuda.txt"
[ "$rc" = 0 ] || step_fail test_cuda
sum "  qwen35-run --backend cuda greedy (Q4_K_M): $r; test_cuda: $([ "$rc" = 0 ] && echo ok || echo FAIL)"

# --- 6. pipeline ---------------------------------------------------------------------------------
case "$SKIP" in
*" pipeline "*) sum "pipeline: skipped (GPU_CHECK_SKIP)" ;;
*)
    say "pipeline: 2 stage processes on GPU $DEV + coordinator vs the same on the CPU"
    for be in cpu cuda; do
        BIN=$BIN MODEL=$GOLDEN/models/tiny-Q4_K_M.gguf BE=$be DEV=$DEV timeout 150 sh -c '
            set -eu
            P35_ME=gpu-check-pipeline
            . client/pipeline.sh
            p35_init
            p35_stage s0 "$MODEL" 0:4 --backend "$BE" --device "$DEV" --max-seqs 2 --max-ctx 256
            p35_stage s1 "$MODEL" 4:8 --backend "$BE" --device "$DEV" --max-seqs 2 --max-ctx 256
            p35_coord "$MODEL" s0 s1 -- --max-seqs 2 --max-ctx 256
            p35_wait_ready 60
            p35_client --temp 0 --ignore-eos -n 24 "Hello from the GPU check"
        ' > "$WORK/pipe-$be.txt" 2> "$WORK/pipe-$be.err" || { tail -n 20 "$WORK/pipe-$be.err"; step_fail "pipeline-$be"; }
    done
    if cmp -s "$WORK/pipe-cpu.txt" "$WORK/pipe-cuda.txt" && [ -s "$WORK/pipe-cuda.txt" ]; then
        say "pipeline: cuda answer identical to cpu ($(wc -c < "$WORK/pipe-cuda.txt") bytes)"
        sum "pipeline: 2 qwen35-stage processes on GPU $DEV (layers 0:4, 4:8) + coordinator: 24-token greedy answer identical to the CPU pipeline's"
    else
        say "pipeline: answers differ or empty"; echo "--- cpu"; cat "$WORK/pipe-cpu.txt"
        echo "--- cuda"; cat "$WORK/pipe-cuda.txt"; step_fail pipeline-compare
        sum "pipeline: FAIL: 2-stage CUDA answer differs from the CPU pipeline's (or empty)"
    fi ;;
esac

# --- 7. bench -----------------------------------------------------------------------------------
case "$SKIP" in *" bench "*) sum "bench: skipped (GPU_CHECK_SKIP)"; finish ;; esac
MINI=${GPU_CHECK_MODEL:-$WORK/mini-q4_k_m.gguf}
if [ ! -f "$MINI" ]; then
    say "bench: generating $MINI (mini preset, Q4_K_M)"
    timeout 180 "$BIN/qwen35-mkmodel" --preset mini --types q4_k_m -o "$MINI" || { step_fail mkmodel; finish; }
fi
sum "bench ($(basename "$MINI"); weight bytes/s as a share of the measured read bandwidth):"
for g in on off; do
    flag=""; [ "$g" = off ] && flag=--no-graphs
    timeout 180 "$BIN/qwen35-gpucheck" --device "$DEV" $flag bench "$MINI" --decode 128 --prefill 64 \
        > "$WORK/bench-$g.txt" 2>&1 || step_fail "bench-graphs-$g"
    sed "s/^bench /bench (graphs $g) /" "$WORK/bench-$g.txt"
    awk -v g="$g" '
        /device read bandwidth/ { bw = $5 }
        /decode  1 seq/ { d1 = $6; share = $13 }
        /decode .* seqs:/ { dm = $5; nm = $3 }
        /prefill/ { pf = $5; np = $3 }
        /^FAIL/ { f = 1 }
        END { if (g == "on") printf "  measured read bandwidth %s GB/s\n", bw
              printf "  graphs %-3s: decode 1 seq %s tok/s (%s of bandwidth), %s seqs %s tok/s, prefill %s tok %s tok/s%s\n",
                     g, d1, share, nm, dm, np, pf, f ? "  FAIL" : "" }' "$WORK/bench-$g.txt" >> "$SUMMARY"
done
[ -z "${GPU_CHECK_MODEL:-}" ] && rm -f "$MINI"
finish
