#!/bin/sh
# it_cuda_k80.sh — the K80 build: `make K80=1` (sm_37 + sm_90 in one fat
# binary, CUDA 11.8, g++-11 host compiler) into build-k80/: the CUDA archive
# and one engine binary (qwen35-run), then
#  - the toolchain is one toolkit: nvcc, the ptxas/cudafe++/fatbinary/nvlink
#    nvcc runs (the image's /usr/local/bin wrappers of CUDA 13 come earlier
#    on PATH) and the static runtime linked are all 11.8 (make
#    cuda-toolchain; a planted wrong ptxas must make that check fail);
#  - nvcc's own plan (--dryrun) runs g++-11 and emits sm_37 and sm_90;
#    the link line takes that toolkit's libcudart_static.a;
#  - NVCCFLAGS= on the command line keeps the project's flags;
#  - every object holds sm_37 and sm_90 code;
#  - the resource check (cuda/resources.sh: block size x registers vs the
#    register file, shared memory <= 48 KiB, spills) passes and prints its
#    table; on planted kernels it must report each planted fault.
# Needs a CUDA 11 toolkit (QWEN35_K80=1 make deps; CI=true installs it):
# skipped (exit 77) with a message without one, except under CI=true, where
# it fails.
set -u
. "$(dirname "$0")/lib.sh"
setup
K80_NVCC=$(ls /usr/lib/nvidia-cuda-toolkit/bin/nvcc /usr/local/cuda-11.8/bin/nvcc /usr/local/cuda-11.4/bin/nvcc 2>/dev/null | head -n 1)
if [ -z "$K80_NVCC" ]; then
    [ "${CI:-}" = true ] &&
        fail "CI=true but no CUDA 11 toolkit (deploy/install-deps.sh installs nvidia-cuda-toolkit under CI)"
    skip "no CUDA 11 toolkit (QWEN35_K80=1 make deps installs Debian's nvidia-cuda-toolkit 11.8 + g++-11)"
fi
MK="make --no-print-directory K80=1"
JOBS=${QWEN35_JOBS:-$(nproc 2>/dev/null || echo 2)}
# objects built before the ptxas reports were kept: build them again
for o in build-k80/obj/cuda/*.cu.o; do [ -f "$o" ] && [ ! -f "$o.ptxas" ] && rm -f "$o"; done
t0=$(date +%s)
if ! $MK -j"$JOBS" build-k80/libqwen35cuda.a build-k80/bin/qwen35-run > "$T/build.log" 2>&1; then
    tail -n 40 "$T/build.log"; fail "make K80=1 build-k80/libqwen35cuda.a build-k80/bin/qwen35-run failed"
fi
echo "it_cuda_k80: make K80=1 (archive + qwen35-run) in $(( $(date +%s) - t0 )) s"

# --- one toolkit ----------------------------------------------------------------
if $MK cuda-toolchain > "$T/tc.txt" 2>&1; then sed 's/^/  /' "$T/tc.txt"
else cat "$T/tc.txt"; fail "make K80=1 cuda-toolchain: the build's tools are not one toolkit"; fi
grep -q '^nvcc .* 11\.' "$T/tc.txt" || fail "K80=1 did not pick a CUDA 11 nvcc: $(head -n 1 "$T/tc.txt")"
# the check must catch a ptxas of another CUDA first on PATH
mkdir -p "$T/fake"
printf '#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.88"\n' > "$T/fake/ptxas"
chmod +x "$T/fake/ptxas"
rt=$(sed -n 's/^runtime  *\([^ ]*\) .*/\1/p' "$T/tc.txt")
if PATH="$T/fake:$PATH" sh cuda/toolchain.sh "$K80_NVCC" x "$rt" "" "37" > "$T/tc-fake.txt" 2>&1 ||
   ! grep -q '^ptxas .*FAIL' "$T/tc-fake.txt"; then
    fail "cuda/toolchain.sh accepts a CUDA 13 ptxas for an 11.8 nvcc: $(cat "$T/tc-fake.txt")"
fi

# --- nvcc's plan, the link line, NVCCFLAGS= -----------------------------------------
$MK -n -B NVCCFLAGS= build-k80/obj/cuda/check.cu.o > "$T/cmd.txt" 2>&1
for f in -std=c++17 'arch=compute_37,code=sm_37' 'arch=compute_90,code=sm_90' '-ccbin g++-11' -Werror; do
    grep -q -- "$f" "$T/cmd.txt" || fail "NVCCFLAGS= on the command line dropped the project's '$f': $(cat "$T/cmd.txt")"
done
cmd=$(grep -- '--resource-usage' "$T/cmd.txt" | head -n 1 | sed 's/ 2>.*//; s/--resource-usage//')
sh -c "$cmd --dryrun" > "$T/dry.txt" 2>&1 || fail "nvcc --dryrun of check.cu failed: $(tail -n 5 "$T/dry.txt")"
grep -q '^#\$ g++-11 ' "$T/dry.txt" || fail "nvcc --dryrun does not run g++-11 as host compiler"
grep -q 'ptxas .*-arch=sm_37' "$T/dry.txt" || fail "nvcc --dryrun runs no ptxas for sm_37"
grep -q 'ptxas .*-arch=sm_90' "$T/dry.txt" || fail "nvcc --dryrun runs no ptxas for sm_90"
$MK -n -B build-k80/bin/qwen35-run 2>/dev/null | grep -- '-o build-k80/bin/qwen35-run' > "$T/link.txt"
grep -q "$rt" "$T/link.txt" || fail "qwen35-run is not linked with $rt: $(cat "$T/link.txt")"
grep -q '/usr/local/cuda' "$T/link.txt" && fail "the K80 link line names another CUDA: $(cat "$T/link.txt")"

# --- fat binary -------------------------------------------------------------------
PATH="$(dirname "$(realpath "$K80_NVCC")"):$(dirname "$(sed -n 's/^ptxas  *\([^ ]*\) .*/\1/p' "$T/tc.txt")"):$PATH"
for o in build-k80/obj/cuda/*.cu.o; do
    elfs=$(cuobjdump --list-elf "$o" 2>/dev/null | sed -n 's/.*\.\(sm_[0-9]*\)\.cubin$/\1/p' | sort -u | tr '\n' ' ')
    case "$elfs" in *sm_37*sm_90*) ;; *) fail "$o: machine code for '$elfs', not sm_37 and sm_90" ;; esac
done

# --- resource check ------------------------------------------------------------------
if $MK cuda-resources > "$T/res.txt" 2>&1; then
    cat "$T/res.txt"
else
    cat "$T/res.txt"; fail "cuda-resources: a kernel exceeds the SM's limits (table above)"
fi
# planted: no __launch_bounds__, spills past the bound, a launch wider than
# its bound, dynamic shared memory not in the table; one clean kernel.
mkdir -p "$T/src" "$T/b/obj/cuda"
cat > "$T/src/planted.cu" <<'EOF'
__global__ void k_nobounds(float *x) { x[threadIdx.x] = 1.0f; }
__global__ void __launch_bounds__(1024, 2) k_spills(const float *in, float *out, int n) {
    float v[96];
#pragma unroll
    for (int i = 0; i < 96; i++) v[i] = in[threadIdx.x + i * n];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 96; j++)
#pragma unroll
        for (int i = 0; i < 96; i++) s += v[i] * v[(i + j) % 96];
    out[threadIdx.x] = s;
}
__global__ void __launch_bounds__(256) k_narrow(float *x) { x[threadIdx.x] = 2.0f; }
__global__ void __launch_bounds__(64) k_dyn(float *x) { extern __shared__ float s[]; s[threadIdx.x] = x[0]; x[1] = s[0]; }
__global__ void __launch_bounds__(128) k_fine(float *x) { x[threadIdx.x] = 3.0f; }
void launch(float *x, int n, cudaStream_t st) {
    k_narrow<<<1, 512, 0, st>>>(x);
    k_dyn<<<1, 64, n * sizeof(float), st>>>(x);
    k_fine<<<1, 128, 0, st>>>(x);
}
EOF
if PATH="$PATH" "$K80_NVCC" -ccbin g++-11 -Wno-deprecated-gpu-targets --resource-usage -arch=sm_37 \
        -c -o "$T/b/obj/cuda/planted.cu.o" "$T/src/planted.cu" 2> "$T/b/obj/cuda/planted.cu.o.ptxas"; then
    Q35_CUDA_SRC="$T/src" sh cuda/resources.sh "$T/b" 37 > "$T/planted.txt" 2>&1 && fail "the resource check passes planted faults"
    for want in 'k_nobounds .*FAIL: no __launch_bounds__' 'k_spills .*FAIL: [0-9]* bytes spilled' \
                'k_narrow .*FAIL: launched with 512 threads > bound 256' 'k_dyn .*FAIL: launched with dynamic shared' \
                'k_fine .* ok$'; do
        grep -q "$want" "$T/planted.txt" || fail "resource check on planted kernels: no line '$want':
$(cat "$T/planted.txt")"
    done
else
    fail "compiling the planted kernels failed: $(tail -n 5 "$T/b/obj/cuda/planted.cu.o.ptxas")"
fi
ok "K80 build: one toolkit, sm_37 + sm_90, resources"
