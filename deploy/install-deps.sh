#!/bin/sh
# Installs the Debian 12 packages qwen35 builds and tests with; does nothing
# when they are all present. Called by the Makefile (make deps), as root.
set -eu
PKGS="build-essential pkg-config clang libclang-rt-14-dev libzmq3-dev \
libprotobuf-c-dev protobuf-c-compiler libsystemd-dev systemd libcmocka-dev \
libpcre2-dev libinih-dev libreadline-dev groff-base libjansson-dev libmicrohttpd-dev libxxhash-dev \
chromium prometheus curl gnuplot-nox \
systemd-container debootstrap stress-ng"
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
echo "install-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends $missing
