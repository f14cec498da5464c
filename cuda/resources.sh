#!/bin/sh
# resources.sh BUILD [ARCH...] — `make cuda-resources`: every kernel's
# resources per arch from the build itself, checked against the SM's limits.
#
#   registers, stack, spills, static shared memory: ptxas's report that the
#     build keeps beside each object (OBJ.ptxas, nvcc --resource-usage);
#   block size: the kernel's __launch_bounds__, read back from the cubin
#     (EIATTR_MAX_THREADS in `cuobjdump -elf`). Every kernel must have one:
#     the driver then refuses a launch with more threads, so it IS the
#     largest block the kernel can run with. Launch sites that pass a number
#     are also compared with it here;
#   dynamic shared memory: the largest each launch site can ask for, from
#     the limits the host code enforces (table DYN below); a kernel launched
#     with a non-zero size that is not in the table fails.
#
# Fails when, for any kernel and arch:
#   block size x registers (allocated per warp in units of 256) > 65536
#     (the most one block may hold on sm_37 — whose SM has 131072 — and on
#     sm_50 … sm_90, whose SM has 65536);
#   static + largest dynamic shared memory > 48 KiB per block;
#   ptxas spills more than SPILL_MAX (64) bytes per thread (stores).
# Prints the table. ARCH (e.g. 37 90) limits the check to those archs and
# fails when one of them is missing from the build. Env: SPILL_MAX,
# Q35_CUDA_SRC (the launch sites' folder, default cuda; tests plant others).
set -u
BUILD=${1:?usage: resources.sh BUILD [ARCH...]}
shift
WANT=$*
SPILL_MAX=${SPILL_MAX:-64}
REGS_PER_BLOCK=65536
SHARED_MAX=49152
T=$(mktemp -d /tmp/q35-resources-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$(dirname "$0")/.." || exit 1

# kernel <TAB> largest dynamic shared bytes <TAB> why
cat > "$T/dyn" <<'EOF'
k_attn_prep	2048	hd floats; head_dim <= 512 (backend.cu's init check)
k_attn	8224	(4 warps x hd + 8) floats; head_dim <= 512
k_ssm_delta	8192	2 x dk floats; dk <= 32 lanes x SSM_R 32 = 1024 (cu_ssm_delta's P <= 32)
k_moe_group	32768	2 x expert_count ints; expert_count <= 4096 (gguf/config.c)
EOF

objs=$(ls "$BUILD"/obj/cuda/*.cu.o 2>/dev/null)
[ -n "$objs" ] || { echo "cuda-resources: no CUDA objects in $BUILD/obj/cuda (build the CUDA archive first)" >&2; exit 1; }
command -v cuobjdump >/dev/null || { echo "cuda-resources: cuobjdump not on PATH (make cuda-resources puts the toolkit's there)" >&2; exit 1; }
command -v c++filt >/dev/null || { echo "cuda-resources: c++filt (binutils) not found" >&2; exit 1; }
fail=0
for o in $objs; do
    [ -f "$o.ptxas" ] || { echo "cuda-resources: $o has no ptxas report $o.ptxas (built before it was kept: rm it and rebuild)" >&2; fail=1; continue; }
    # mangled arch regs smem stack spill_st spill_ld
    awk '/Compiling entry function/ { fn = $7; gsub(/\047/, "", fn); ar = $9; gsub(/[^0-9]/, "", ar) }
         /bytes stack frame/ { st = $1; ss = $5; sl = $9 }
         /Used [0-9]+ registers/ { sm = 0; for (i = 1; i <= NF; i++) if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) sm = $i
                                   print fn, ar, $5, sm, st, ss, sl }' "$o.ptxas" >> "$T/ptxas"
    # mangled arch max_threads (from the cubin)
    cuobjdump -elf "$o" | awk '/^arch = sm_/ { ar = $3; sub(/sm_/, "", ar) }
         /^\.nv\.info\./ { fn = $1; sub(/^\.nv\.info\./, "", fn) }
         /EIATTR_MAX_THREADS/ { want = 2; next }
         want && --want == 0 { print fn, ar, strtonum_hex($2) }
         function strtonum_hex(h,   v, i, c) { h = tolower(h); sub(/^0x/, "", h); v = 0
             for (i = 1; i <= length(h); i++) { c = index("0123456789abcdef", substr(h, i, 1)) - 1; v = v * 16 + c }
             return v }' >> "$T/bounds"
done
[ -s "$T/ptxas" ] || { echo "cuda-resources: no kernels found in the ptxas reports" >&2; exit 1; }

# launch sites: kernel name, block size when a number, dynamic shared size expression
cat "${Q35_CUDA_SRC:-cuda}"/*.cu | tr '\n' ' ' | grep -oE '\bk_[A-Za-z0-9_]+(<[^<>]*>)?<<<[^>]*>>>' |
    sed -E 's/^(k_[A-Za-z0-9_]+)(<[^<>]*>)?<<<(.*)>>>$/\1\t\3/' > "$T/launches"

# mangled <TAB> demangled, for every kernel at once
awk '{ print $1 }' "$T/ptxas" | sort -u > "$T/mangled"
c++filt < "$T/mangled" | paste "$T/mangled" - > "$T/names"
awk -v dynf="$T/dyn" -v boundf="$T/bounds" -v launchf="$T/launches" -v namef="$T/names" -v want=" $WANT " \
    -v spill_max="$SPILL_MAX" -v regs_max="$REGS_PER_BLOCK" -v shared_max="$SHARED_MAX" '
BEGIN {
    FS = "\t"
    while ((getline l < dynf) > 0) { split(l, f, "\t"); dyn[f[1]] = f[2] }
    FS = " "
    while ((getline l < boundf) > 0) { split(l, f, " "); bound[f[1] " " f[2]] = f[3] }
    FS = "\t"
    while ((getline l < launchf) > 0) {
        split(l, f, "\t"); k = f[1]; n = splitargs(f[2], a)
        gsub(/ /, "", a[2]); gsub(/ /, "", a[3])
        if (a[2] ~ /^[0-9]+$/ && (!(k in lit) || a[2] + 0 > lit[k])) lit[k] = a[2] + 0
        if (n >= 3 && a[3] != "0" && a[3] != "") dynused[k] = a[3]
    }
    while ((getline l < namef) > 0) { split(l, f, "\t"); dname[f[1]] = f[2] }
    FS = " "
    printf "%-44s %4s %5s %4s %8s %6s %6s %6s %6s  %s\n", "kernel", "sm", "block", "regs", "regs/blk",
           "smem", "dyn", "stack", "spill", "status"
}
{
    mangled = $1; arch = $2
    if (want != "  " && index(want, " " arch " ") == 0) next
    seen[arch] = 1
    name = dname[mangled]
    base = name; sub(/\(.*/, "", base); sub(/^void /, "", base); short = base; sub(/<.*/, "", short)
    st = "ok"; bad = 0
    blk = bound[mangled " " arch]
    if (blk == "") { blk = "-"; st = "FAIL: no __launch_bounds__"; bad = 1 }
    regs = $3 + 0
    if (blk != "-") {
        warps = int((blk + 31) / 32); pw = int((regs * 32 + 255) / 256) * 256; rb = warps * pw
        if (rb > regs_max) { st = "FAIL: " rb " registers per block > " regs_max; bad = 1 }
        if ((short in lit) && lit[short] > blk) { st = "FAIL: launched with " lit[short] " threads > bound " blk; bad = 1 }
    } else rb = "-"
    d = (short in dyn) ? dyn[short] : 0
    if ((short in dynused) && !(short in dyn)) { st = "FAIL: launched with dynamic shared memory (" dynused[short] ") not in the table"; bad = 1 }
    if ($4 + d > shared_max) { st = "FAIL: " $4 " + " d " bytes shared > " shared_max; bad = 1 }
    if ($6 + 0 > spill_max) { st = "FAIL: " $6 " bytes spilled > " spill_max; bad = 1 }
    if (length(base) > 44) base = substr(base, 1, 41) "..."
    printf "%-44s %4s %5s %4d %8s %6d %6d %6d %6s  %s\n", base, arch, blk, regs, rb, $4, d, $5, $6 "/" $7, st
    nk[arch]++; if (bad) nbad++
    if (regs > maxr[arch]) maxr[arch] = regs
    if ($6 + 0 > maxs[arch]) maxs[arch] = $6 + 0
}
# split a launch configuration at the commas outside parentheses
function splitargs(str, out,   i, c, d, n, cur) {
    n = 0; d = 0; cur = ""
    for (i = 1; i <= length(str); i++) {
        c = substr(str, i, 1)
        if (c == "(") d++
        if (c == ")") d--
        if (c == "," && d == 0) { out[++n] = cur; cur = ""; continue }
        cur = cur c
    }
    out[++n] = cur
    return n
}
END {
    n = split(want, w, " ")
    for (i = 1; i <= n; i++) if (!(w[i] in seen)) { print "cuda-resources: FAIL: no sm_" w[i] " code in the build"; nbad++ }
    for (ar in nk) printf "cuda-resources: sm_%s: %d kernels, at most %d registers, at most %d bytes spilled\n", ar, nk[ar], maxr[ar], maxs[ar]
    printf "cuda-resources: limits: block x registers <= %d, static + dynamic shared <= %d bytes, spill stores <= %d bytes: %s\n",
           regs_max, shared_max, spill_max, nbad ? nbad " FAILED" : "all kernels within"
    exit nbad ? 1 : 0
}' "$T/ptxas" || fail=1
exit "$fail"
