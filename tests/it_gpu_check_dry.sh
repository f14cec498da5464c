#!/bin/sh
# it_gpu_check_dry.sh — the dry run of `make gpu-check`: the lent GPU
# machine's one run, here, without a GPU. A bare container — a Debian 12
# minbase root with build-essential only (what we assume the lent image has:
# a C/C++ compiler for nvcc, make, binutils, a POSIX userland; none of the
# project's -dev libraries), no network (--private-network), read-only —
# gets exactly what one run carries (the working tree's tracked and
# untracked-not-ignored files, plus gpu-bundle/ from `make gpu-bundle`) and
# the CUDA 13 toolkit bind-mounted read-only (/usr/local/cuda-13.0), runs
# `sh cuda/gpu-check.sh`, which must build everything (daemons, tools, test
# programs, CUDA backend) and stop at "no CUDA device" with exit 3.
# Also checked: the run's size (<= 60 MiB) and that the container really is
# bare (no libzmq3-dev, no protoc-c, only the loopback interface).
#
# The root is made once by debootstrap and cached in /var/tmp (about 2-3
# minutes with a mirror); skipped with a message when not root, without
# systemd-nspawn / debootstrap, without a CUDA 12+ toolkit to bind, or when
# nspawn cannot start a container here.
# Env: QWEN35_GPU_ROOT (default /var/tmp/qwen35-gpu-root-HASH), MIRROR,
# Q35_DRY_CUDA (the toolkit to bind; default: where /usr/local/cuda points),
# KEEP=1 keeps the work dir.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u -o pipefail
. "$(dirname "$0")/lib.sh"
GOLDEN=$G
# the lent machine's kind of toolkit: this machine's CUDA (12+: its nvcc
# builds the default archs), bound at its own path
CUDA_DIR=${Q35_DRY_CUDA:-$(realpath /usr/local/cuda 2>/dev/null || echo /usr/local/cuda-13.0)}
PKGS=build-essential
BASE=${QWEN35_GPU_ROOT:-/var/tmp/qwen35-gpu-root-$(echo "$PKGS" | md5sum | cut -c1-8)}
T0=$(date +%s)
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
for c in systemd-nspawn debootstrap flock git; do
    command -v $c >/dev/null || skip "no $c (deploy/install-deps.sh installs systemd-container, debootstrap)"
done
[ -x "$CUDA_DIR/bin/nvcc" ] || skip "no CUDA toolkit at $CUDA_DIR to bind (Q35_DRY_CUDA=dir)"
[ -f "$GOLDEN/tokens64.txt" ] || fail "no golden data at $GOLDEN"
# a private mount namespace with a tmpfs for nspawn's propagation folder:
# on a host whose /run is not a tmpfs nspawn refuses to clean it up
if [ -z "${Q35_IT_DRY_NS:-}" ] && command -v unshare >/dev/null; then
    Q35_IT_DRY_NS=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
if [ -n "${Q35_IT_DRY_NS:-}" ]; then
    mkdir -p /run/systemd/nspawn && mount -t tmpfs tmpfs /run/systemd/nspawn 2>/dev/null || true
fi
W=$(mktemp -d /var/tmp/q35-it-gpudry-XXXXXX)
cleanup() {
    local rc=$?
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $W"; else rm -rf --one-file-system "$W"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# --- the bundle (debs fetched again only when cuda/fetch-debs.sh changed) ------------
t=$(date +%s)
GOLDEN=$GOLDEN sh cuda/gpu-bundle.sh gpu-bundle > "$W/bundle.log" 2>&1 ||
    { tail -n 15 "$W/bundle.log"; fail "make gpu-bundle failed (it needs a Debian mirror for the .debs)"; }
echo "it_gpu_check_dry: gpu-bundle in $(( $(date +%s) - t )) s: $(sed -n 's/^total: *//p' gpu-bundle/MANIFEST)"

# --- the cached root (flock: two runs never build it together) -----------------------
apt_mirror() {
    local m
    m=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | head -n 1)
    [ -n "$m" ] || m=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1)
    echo "${m:-http://deb.debian.org/debian}"
}
exec 9>"$BASE.lock"
flock -w 1500 9 || fail "waited 25 min for $BASE.lock"
if [ ! -x "$BASE/usr/bin/gcc" ]; then
    t=$(date +%s)
    rm -rf "$BASE.tmp"
    timeout 1200 debootstrap --variant=minbase --include="$PKGS" \
        bookworm "$BASE.tmp" "${MIRROR:-$(apt_mirror)}" > "$W/debootstrap.log" 2>&1 ||
        { tail -n 5 "$W/debootstrap.log"; fail "debootstrap bookworm from ${MIRROR:-$(apt_mirror)} failed"; }
    mv "$BASE.tmp" "$BASE"
    echo "it_gpu_check_dry: built the cached root $BASE (minbase + $PKGS) in $(( $(date +%s) - t )) s"
fi
# mount points for the read-only root
mkdir -p "$BASE/q35" "$BASE$CUDA_DIR" || fail "mkdir in $BASE"
flock -s 9      # shared from now on: nobody rebuilds it under us (it is mounted read-only)

# --- exactly what one run carries ----------------------------------------------------------
mkdir -p "$W/tree"
{ git ls-files -co --exclude-standard -z; find gpu-bundle -type f -print0; } |
    tar --null -T - -cf - | tar -xf - -C "$W/tree" || fail "copying the working tree + gpu-bundle"
size=$(du -sb "$W/tree" | cut -f1)
echo "it_gpu_check_dry: the run carries $size bytes ($((size / 1048576)) MiB; limit 64, budget 60)"
[ "$size" -le $((60 * 1048576)) ] || fail "working tree + gpu-bundle is $size bytes > 60 MiB"

NS=(systemd-nspawn --quiet --register=no --keep-unit --console=pipe --private-network --read-only --tmpfs=/tmp
    --directory="$BASE" --bind="$W/tree:/q35" --bind-ro="$CUDA_DIR" --chdir=/q35
    --setenv=PATH="$CUDA_DIR/bin":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    --setenv=LANG=C.UTF-8)
# bare: no -dev library of the project, no protoc-c, loopback only
facts=$(timeout 60 "${NS[@]}" sh -c 'dpkg-query -W -f="\${Status}" libzmq3-dev 2>/dev/null | grep -q installed && echo has-libzmq3-dev
    [ -e /usr/include/zmq.h ] && echo has-zmq.h; command -v protoc-c >/dev/null && echo has-protoc-c
    echo "net: $(ls /sys/class/net | tr "\n" " ")"; command -v gcc >/dev/null && echo has-gcc' 2>&1) ||
    skip "systemd-nspawn cannot start a container here: $(echo "$facts" | tail -n 1)"
case "$facts" in *has-libzmq3-dev*|*has-zmq.h*|*has-protoc-c*) fail "the container is not bare: $facts" ;; esac
echo "$facts" | grep -Eq "^net: lo *$" || fail "the container has a network besides lo: $facts"
echo "$facts" | grep -q has-gcc || fail "no gcc in the container root $BASE"

# --- the run ----------------------------------------------------------------------------------
t=$(date +%s)
timeout 1800 "${NS[@]}" sh cuda/gpu-check.sh > "$W/run.log" 2>&1
rc=$?
el=$(( $(date +%s) - t ))
sed -n '/=== gpu-check summary/,$p' "$W/run.log"
[ "$rc" = 3 ] || { tail -n 40 "$W/run.log"; fail "gpu-check.sh in the bare container: exit $rc, want 3 (built, no CUDA device)"; }
grep -q '^result: no CUDA device' "$W/run.log" || fail "no 'no CUDA device' result line"
for b in qwen35-stage qwen35-coordinator qwen35-client qwen35-http qwen35-run qwen35-mkmodel qwen35-gpucheck qwen35-info; do
    [ -x "$W/tree/build-gpu/bin/$b" ] || fail "gpu-check did not build $b"
done
[ -x "$W/tree/build-gpu/tests/test_cuda" ] || fail "gpu-check did not build tests/test_cuda"
[ -f "$W/tree/build-gpu/libqwen35cuda.a" ] || fail "gpu-check did not build the CUDA backend"
ok "bare container built everything and stopped at 'no CUDA device' (exit 3) in $el s; test total $(( $(date +%s) - T0 )) s"
