#!/bin/sh
# toolchain.sh NVCC CUDA_HOME CUDART_STATIC CCBIN ARCHS — `make cuda-toolchain`:
# prints what a CUDA build runs (with the PATH cuda.mk gives nvcc) and fails
# when the pieces are not one toolkit: ptxas, cudafe++, fatbinary and nvlink
# found on that PATH and the static runtime must be nvcc's release (a
# wrapper of another CUDA earlier on PATH would compile for the wrong one).
set -u
NVCC=$1 HOME_=$2 RT=$3 CCBIN=$4 ARCHS=$5
rel() { "$@" --version 2>&1 | sed -n 's/.*release \([0-9][0-9.]*\),.*/\1/p' | tail -n 1; }
want=$(rel "$NVCC")
[ -n "$want" ] || { echo "cuda-toolchain: $NVCC --version names no release" >&2; exit 1; }
bad=0
printf '%-10s %-52s %s\n' nvcc "$NVCC" "$want"
printf '%-10s %s\n' CUDA_HOME "$HOME_"
for t in ptxas cudafe++ fatbinary nvlink; do
    p=$(command -v "$t" 2>/dev/null) || { printf '%-10s %-52s %s\n' "$t" "(not on PATH)" FAIL; bad=1; continue; }
    r=$(rel "$p")
    st=ok; [ "$r" = "$want" ] || { st="FAIL: not $want"; bad=1; }
    printf '%-10s %-52s %s %s\n' "$t" "$(realpath "$p")" "${r:-?}" "$st"
done
# The static runtime's release: cudaRuntimeGetVersion in a program linked
# with it (CUDA 12+ answers without a driver), else the Debian package that
# ships the file (11.x asks the driver first).
T=$(mktemp -d /tmp/q35-toolchain-XXXXXX)
printf '#include <stdio.h>\nint cudaRuntimeGetVersion(int *);\nint main(void) { int v = 0; if (cudaRuntimeGetVersion(&v)) return 1; printf("%%d.%%d\\n", v / 1000, v %% 1000 / 10); return 0; }\n' > "$T/v.c"
rv=""
${CC:-cc} -o "$T/v" "$T/v.c" "$RT" -ldl -lrt -lpthread -lstdc++ 2>/dev/null && rv=$("$T/v" 2>/dev/null)
rm -rf "$T"
if [ -z "$rv" ] && pkg=$(dpkg-query -S "$(realpath "$RT")" 2>/dev/null | cut -d: -f1); then
    rv=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
fi
st=ok; [ "$rv" = "$want" ] || { st="FAIL: not $want"; bad=1; }
printf '%-10s %-52s %s %s\n' runtime "$(realpath "$RT")" "${rv:-?}" "$st"
host=${CCBIN:-"(nvcc's default)"}
[ -n "$CCBIN" ] && host="$CCBIN ($($CCBIN -dumpfullversion 2>/dev/null || echo 'not found'))"
printf '%-10s %s\n' host "$host"
printf '%-10s %s\n' archs "$ARCHS"
exit "$bad"
