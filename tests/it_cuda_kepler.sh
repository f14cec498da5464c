#!/bin/sh
# it_cuda_kepler.sh — the Kepler rules (Tesla K80: compute capability 3.7,
# driver 470 = CUDA 11.4) stay true in cuda/:
#
#  1. source scan of cuda/*.cu, *.cuh: no int8 dot (__dp4a/__dp2a), no
#     half-precision arithmetic (__hadd/__hmul/__hfma…, half2 / bfloat162
#     packed types, h2exp…; fp16 *storage* with __half2float is fine), no
#     tensor cores (wmma, mma, ldmatrix, wgmma), no cp.async / pipelines,
#     no memory pools (cudaMallocAsync, cudaMemPool*), no cooperative
#     groups or clusters, no sm_70+ warp intrinsics (__reduce_*_sync,
#     __match_*_sync, __nanosleep), no runtime API newer than 11.4
#     (cudaLaunchKernelEx, cudaGraphInstantiateWithParams, …). Lines inside
#     `#if __CUDA_ARCH__ >= 500` (or higher) blocks are exempt: README's rule
#     for fast paths of newer GPUs. Comments are not scanned.
#  2. the runtime API the built CUDA archive calls (its undefined cuda*
#     symbols, `nm`) is on an allowlist of CUDA <= 11.4 functions that work
#     on compute 3.7: a new call fails here until it is checked and listed.
#     Half arithmetic written with operators on __half cannot be grepped; the
#     sm_37 build (it_cuda_k80.sh) rejects it (cuda_fp16.hpp defines those
#     operators from sm_53 only).
#
# Both checks first run on planted files and must catch every planted
# violation (and skip the guarded and commented ones): a check that cannot
# fail fails the test.
set -u
. "$(dirname "$0")/lib.sh"
setup

# rule name <TAB> extended regex (matched on code with comments removed)
cat > "$T/rules" <<'EOF'
int8-dot	\b__dp[24]a(_lo|_hi)?\b
half-arith	\b__h(add|sub|mul|fma|div|neg|abs|max|min|eq|ne|lt|le|gt|ge|equ|neu|ltu|leu|gtu|geu|isnan|isinf)(2|_sat|_rn|_relu|_nan)*\b
half-packed	\b(__)?half2\b|\b(__)?nv_bfloat162\b|\b__(float|floats|half|low|high|lows|highs)2half2(_rn)?\b
half-math	\bh2?(exp|exp2|exp10|log|log2|log10|sqrt|rsqrt|rcp|sin|cos|floor|ceil|trunc|rint)\(
tensor-core	\b(nvcuda::)?wmma\b|<mma\.h>|\bmma\.sync\b|\bldmatrix\b|\bwgmma\b|\b__(i|b|d)?mma_|\bmma::
async-copy	\bcp\.async\b|\b__pipeline_[a-z_]+\b|\bmemcpy_async\b|<cuda/(pipeline|barrier)>|\bcuda::(barrier|pipeline)\b
memory-pool	\bcuda(MallocAsync|FreeAsync|MallocFromPoolAsync|MemPool[A-Za-z_]*|DeviceGetDefaultMemPool|DeviceSetMemPool|DeviceGetMemPool)\b
coop-groups	\bcooperative_groups\b|<cooperative_groups|\bcudaLaunchCooperativeKernel|\bthis_grid\b|\b__cluster_dims__\b|\bcluster_group\b
sm70-warp	\b__(reduce_(add|min|max|and|or|xor)|match_(any|all))_sync\b|\b__nanosleep\b
api-after-11.4	\bcuda(LaunchKernelEx|LaunchAttribute[A-Za-z]*|GraphInstantiateWithParams|GraphAddNode|GraphConditional[A-Za-z]*|StreamBeginCaptureToGraph|GraphNodeSetEnabled|GraphNodeGetEnabled|GraphInstantiateFlagUseNodePriority|GraphExecGetFlags|GraphAddMemAllocNode|GraphAddMemFreeNode|DeviceGraphMemTrim|OccupancyMaxActiveClusters|OccupancyMaxPotentialClusterSize|MemcpyBatchAsync|Library[A-Z][A-Za-z]*|Kernel_t|GetDriverEntryPointByVersion|StreamGetCaptureInfo_v3|ArrayGetMemoryRequirements|MipmappedArrayGetMemoryRequirements|GraphDebugDotPrint|UserObjectCreate|GraphRetainUserObject|GetFuncBySymbol|GetKernel)\b
EOF

# scan FILE...: "file:line: rule: code" for every hit outside a
# `#if __CUDA_ARCH__ >= N` (N >= 500) region; block and line comments are
# blanked first.
scan() {
    awk -v RULES="$T/rules" '
    BEGIN { FS = "\t"; while ((getline l < RULES) > 0) { split(l, f, "\t"); n++; name[n] = f[1]
                                                  # \b as a non-word character (mawk has no \b;
                                                  # lines are matched padded with blanks)
                                                  gsub(/\\b/, "[^A-Za-z0-9_]", f[2]); re[n] = f[2] }
            FS = " " }
    FNR == 1 { depth = 0; incom = 0 }
    {
        line = $0; code = ""
        # comments out, across lines for /* */ (strings stay: asm() text is code)
        while (length(line) > 0) {
            if (incom) { e = index(line, "*/"); if (!e) { line = ""; break } line = substr(line, e + 2); incom = 0; continue }
            b = index(line, "/*"); c = index(line, "//")
            if (!b && !c) { code = code line; break }
            if (c && (!b || c < b)) { code = code substr(line, 1, c - 1); break }
            code = code substr(line, 1, b - 1); incom = 1; line = substr(line, b + 2)
        }
        # preprocessor regions: guard[d] = 1 inside #if __CUDA_ARCH__ >= 500+
        if (code ~ /^[ \t]*#[ \t]*if/) {
            depth++; guard[depth] = newer(code); next
        }
        if (code ~ /^[ \t]*#[ \t]*elif/) { guard[depth] = newer(code); next }
        if (code ~ /^[ \t]*#[ \t]*else/) { guard[depth] = 0; next }
        if (code ~ /^[ \t]*#[ \t]*endif/) { if (depth > 0) depth--; next }
        for (d = 1; d <= depth; d++) if (guard[d]) next
        for (i = 1; i <= n; i++)
            if ((" " code " ") ~ re[i]) { sub(/^[ \t]+/, "", code); printf "%s:%d: %s: %s\n", FILENAME, FNR, name[i], code }
    }
    function newer(s,   v) {
        if (!match(s, /__CUDA_ARCH__[ \t]*>=?[ \t]*[0-9]+/)) return 0
        v = substr(s, RSTART, RLENGTH); gsub(/[^0-9]/, "", v)
        return v + 0 >= 500
    }' "$@"
}

# --- 1a. the scan catches what it must (and only that) ------------------------
cat > "$T/planted.cu" <<'EOF'
// a comment naming __dp4a, wmma and cudaMallocAsync is not code
/* nor is a block comment: __hfma2(a, b, c)
   over lines: cp.async.ca.shared */
__global__ void k_bad(const int *a, const int *b, int *c, float *f) {
    c[0] = __dp4a(a[0], b[0], c[0]);
    __half2 h = __floats2half2_rn(f[0], f[1]);
    __half x = __hmul(__float2half(f[0]), __float2half(f[1]));
    f[2] = __half2float(hexp(x));
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(0), "l"(a));
    __pipeline_commit();
    unsigned m = __match_any_sync(0xffffffffu, a[1]);
#if __CUDA_ARCH__ >= 610
    c[1] = __dp4a(a[1], b[1], c[1]);      // guarded fast path: allowed
#else
    c[1] = __dp2a_lo(a[1], b[1], c[1]);   // the sm_37 side of the guard: caught
#endif
}
void host(void *p, cudaStream_t st) {
    cudaMallocAsync(&p, 64, st);
    cudaMemPool_t pool;
    cudaLaunchKernelEx(0, 0);
    namespace cg = cooperative_groups;
}
EOF
cat > "$T/planted.want" <<'EOF'
5 int8-dot
6 half-packed
7 half-arith
8 half-math
9 tensor-core
10 async-copy
11 async-copy
12 sm70-warp
16 int8-dot
20 memory-pool
21 memory-pool
22 api-after-11.4
23 coop-groups
EOF
scan "$T/planted.cu" > "$T/planted.hits"
awk -F': ' '{ split($1, p, ":"); print p[2], $2 }' "$T/planted.hits" | sort -u -k1,1n > "$T/planted.got"
if ! cmp -s "$T/planted.want" "$T/planted.got"; then
    fail "the source scan does not report exactly the planted violations (line rule; - wanted, + got):"
    diff "$T/planted.want" "$T/planted.got" | sed -n 's/^</  -/p; s/^>/  +/p'
fi
printf '__global__ void k_ok(const float *x, float *y) { y[0] = __half2float(__ushort_as_half(1)) + x[0]; }\n' > "$T/clean.cu"
[ -z "$(scan "$T/clean.cu")" ] || fail "the source scan flags fp16 storage/conversion: $(scan "$T/clean.cu")"

# --- 1b. cuda/ ------------------------------------------------------------------
SRCS=$(ls cuda/*.cu cuda/*.cuh 2>/dev/null)
if [ -z "$SRCS" ]; then fail "no cuda/*.cu sources found"
else
    # shellcheck disable=SC2086
    scan $SRCS > "$T/hits"
    if [ -s "$T/hits" ]; then
        fail "Kepler rules broken in cuda/ (guard newer-GPU paths with #if __CUDA_ARCH__ >= N):"
        sed 's/^/  /' "$T/hits"
    else
        echo "it_cuda_kepler: source scan: $(echo $SRCS | wc -w) files, $(cat $SRCS | wc -l) lines, no Kepler rule broken"
    fi
fi

# --- 2. runtime API calls of the built archives vs the 11.4 allowlist ----------
# Runtime functions of CUDA <= 11.4 that compute 3.7 supports. Add a name
# only after checking both (CUDA 11.4 Runtime API reference; Kepler has no
# memory pools, no stream-ordered allocation, no cooperative launch on
# driver 470 for sm_37 multi-device).
ALLOW="cudaChooseDevice cudaDeviceGetAttribute cudaDeviceGetLimit cudaDeviceReset
cudaDeviceSetLimit cudaDeviceSynchronize cudaDeviceCanAccessPeer cudaDeviceEnablePeerAccess
cudaDeviceDisablePeerAccess cudaDriverGetVersion cudaRuntimeGetVersion cudaGetDevice
cudaGetDeviceCount cudaGetDeviceProperties cudaSetDevice cudaSetDeviceFlags cudaGetDeviceFlags
cudaGetErrorName cudaGetErrorString cudaGetLastError cudaPeekAtLastError
cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority cudaStreamDestroy
cudaStreamSynchronize cudaStreamQuery cudaStreamWaitEvent cudaStreamBeginCapture
cudaStreamEndCapture cudaStreamIsCapturing cudaStreamGetCaptureInfo cudaThreadExchangeStreamCaptureMode
cudaEventCreate cudaEventCreateWithFlags cudaEventDestroy cudaEventElapsedTime cudaEventQuery
cudaEventRecord cudaEventSynchronize
cudaMalloc cudaMallocHost cudaMallocPitch cudaHostAlloc cudaHostRegister cudaHostUnregister
cudaHostGetDevicePointer cudaFree cudaFreeHost cudaMemGetInfo cudaMemcpy cudaMemcpyAsync
cudaMemcpy2D cudaMemcpy2DAsync cudaMemcpyPeer cudaMemcpyPeerAsync cudaMemcpyToSymbol
cudaMemcpyToSymbolAsync cudaMemcpyFromSymbol cudaMemcpyFromSymbolAsync cudaGetSymbolAddress
cudaMemset cudaMemsetAsync cudaMemset2D cudaMemset2DAsync cudaPointerGetAttributes
cudaLaunchKernel cudaLaunchHostFunc cudaFuncGetAttributes cudaFuncSetAttribute
cudaFuncSetCacheConfig cudaFuncSetSharedMemConfig cudaDeviceSetCacheConfig
cudaDeviceSetSharedMemConfig cudaOccupancyMaxActiveBlocksPerMultiprocessor
cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags cudaOccupancyMaxPotentialBlockSize
cudaGraphCreate cudaGraphDestroy cudaGraphInstantiate cudaGraphInstantiateWithFlags
cudaGraphLaunch cudaGraphExecDestroy cudaGraphExecUpdate cudaGraphGetNodes
cudaProfilerStart cudaProfilerStop"
api_check() {    # api_check SYMBOL_FILE: names not on the allowlist
    echo "$ALLOW" | tr ' ' '\n' | sed '/^$/d' | sort -u > "$T/allow"
    # per-thread default stream variants and CUDA 12's _v2 names are the same call
    sed 's/_ptsz$//; s/_ptds$//; s/_v2$//' "$1" | sort -u | comm -23 - "$T/allow"
}
printf 'cudaMalloc\ncudaMemcpyAsync_ptsz\ncudaGetDeviceProperties_v2\ncudaMallocAsync\ncudaLaunchKernelEx\n' > "$T/planted.syms"
[ "$(api_check "$T/planted.syms" | tr '\n' ' ')" = "cudaLaunchKernelEx cudaMallocAsync " ] ||
    fail "the API allowlist check does not catch the planted cudaMallocAsync and cudaLaunchKernelEx: $(api_check "$T/planted.syms" | tr '\n' ' ')"
nlib=0
seen=""
for lib in "$BUILD/libqwen35cuda.a" build-k80/libqwen35cuda.a; do
    [ -f "$lib" ] || continue
    case " $seen " in *" $(realpath "$lib") "*) continue ;; esac
    seen="$seen $(realpath "$lib")"
    nlib=$((nlib + 1))
    nm "$lib" 2>/dev/null | awk '$1 == "U" && $2 ~ /^cuda[A-Z]/ { print $2 }' | sort -u > "$T/syms"
    [ -s "$T/syms" ] || { fail "$lib: no cuda* runtime calls found with nm (is it the CUDA archive?)"; continue; }
    extra=$(api_check "$T/syms" | tr '\n' ' ')
    if [ -n "$extra" ]; then
        fail "$lib calls runtime API outside the CUDA 11.4 / compute 3.7 allowlist: $extra"
    else
        echo "it_cuda_kepler: $lib: $(wc -l < "$T/syms") runtime API functions, all on the 11.4 allowlist"
    fi
done
[ "$nlib" = 0 ] && echo "it_cuda_kepler: API check not run (no CUDA archive in $BUILD or build-k80: nvcc not found or CUDA=0)"
ok "source scan and runtime API allowlist"
