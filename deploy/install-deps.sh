#!/bin/sh
# Installs the Debian 12 packages qwen35 builds and tests with; does nothing
# when they are all present. Called by the Makefile (make deps), as root.
#
# K80 toolkit (opt-in: QWEN35_K80=1, and always under CI=true so CI builds
# sm_37 on every run while `.ci/run` stays exactly `make test`): Debian's
# nvidia-cuda-toolkit 11.8 (non-free; the last CUDA that emits sm_37) and
# g++-11, its newest supported host compiler. A fresh machine's plain
# `make test` does not need it: the K80 build is skipped with a message.
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev libzmq3-dev \
libprotobuf-c-dev protobuf-c-compiler libsystemd-dev systemd libcmocka-dev \
libpcre2-dev libinih-dev libreadline-dev groff-base libjansson-dev libmicrohttpd-dev libxxhash-dev \
chromium prometheus curl gnuplot-nox \
systemd-container debootstrap stress-ng"
K80_PKGS="nvidia-cuda-toolkit g++-11"
K80=0
if [ "${QWEN35_K80:-0}" = 1 ] || [ "${CI:-}" = true ]; then
    K80=1
    PKGS="$PKGS $K80_PKGS"
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $p"
done
# Node.js and npm run the HTTP tests' clients (the openai SDK, puppeteer-core):
# Debian's, unless a node with its npm is already there.
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "install-deps: missing Debian packages:$missing (run 'make deps' as root)" >&2
    exit 1
fi
# nvidia-cuda-toolkit is in Debian's non-free component (and needs
# nvidia-support from contrib), which a default install does not list: add
# the missing ones in a file of our own (the system's sources stay as they
# are), from the same mirror apt already uses.
has_component() {
    grep -hsE '^(Components:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources | grep -qE " $1( |\$)"
}
EXTRA_SRC=/etc/apt/sources.list.d/qwen35-non-free.sources
case "$K80:$missing" in
1:*nvidia-cuda-toolkit*)
    comps=""
    for c in contrib non-free; do has_component "$c" || comps="$comps $c"; done
    if [ -n "$comps" ]; then
        mirror=$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -n 1)
        [ -n "$mirror" ] || mirror=$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list |
            awk '{print $2}' | grep -v security | head -n 1)
        mirror=${mirror:-http://deb.debian.org/debian}
        echo "install-deps: enabling Debian's$comps ($mirror) in $EXTRA_SRC"
        cat >"$EXTRA_SRC" <<SRC
# added by qwen35's deploy/install-deps.sh for nvidia-cuda-toolkit (K80 build)
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components:$comps
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi ;;
esac
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $missing
