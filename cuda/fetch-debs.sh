#!/bin/sh
# fetch-debs.sh — run on a Debian 12 machine with network (the build
# machines), BEFORE borrowing a GPU machine: downloads the .deb files of the
# libraries the daemons and tests link (ZeroMQ, protobuf-c + protoc-c,
# libsystemd, inih, PCRE2, cmocka) with their runtime dependencies into
# cuda/debs/ (git-ignored; carry it to the GPU machine). There,
# cuda/gpu-check.sh unpacks them with `dpkg -x` (or ar + tar) into a local
# prefix: the GPU image has nvcc and the driver but no Debian -dev packages
# and no network.
#
#   sh cuda/fetch-debs.sh [DEST]        default DEST: cuda/debs
set -eu
DEST=${1:-$(dirname "$0")/debs}
TOP="libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libsystemd-dev libinih-dev \
libpcre2-dev libcmocka-dev"
# Never shipped: the C library and compiler runtime (the GPU image has its
# own, and a second copy would shadow it), and -dev packages other than the
# ones named above (headers of indirect dependencies are never compiled
# against: linking needs their shared libraries only).
SKIP_RE='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|libstdc\+\+6|gcc-12-base|libcrypt1|libnsl2|libtirpc3|libtirpc-common|rpcsvc-proto|icu-devtools|krb5-multidev|libkadm5.*|libkdb5.*|libgssrpc4)$'
command -v apt-get >/dev/null || { echo "fetch-debs: apt-get not found (run this on Debian 12)" >&2; exit 1; }
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
        --no-replaces --no-enhances $TOP | grep -v '^ ' | grep -v '^<' | sort -u)
want=""
for p in $pkgs; do
    echo "$p" | grep -Eq "$SKIP_RE" && continue
    case "$p" in
    *-dev) case " $TOP " in *" $p "*) ;; *) continue ;; esac ;;
    esac
    want="$want $p"
done
mkdir -p "$DEST"
cd "$DEST"
rm -f ./*.deb
echo "fetch-debs: downloading into $(pwd):$want"
apt-get download $want
echo "fetch-debs: $(ls ./*.deb | wc -l) files, $(du -sh . | cut -f1); carry $DEST to the GPU machine"
