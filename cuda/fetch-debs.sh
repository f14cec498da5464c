#!/bin/sh
# fetch-debs.sh — run on a Debian 12 machine with network (the build
# machines), BEFORE borrowing a GPU machine (make gpu-bundle runs it):
# downloads the .deb files of the libraries the daemons, tools and tests
# link (ZeroMQ, protobuf-c + protoc-c, libsystemd, inih, PCRE2, cmocka,
# readline, jansson, libmicrohttpd) with their runtime dependencies into
# DEST. There, cuda/gpu-check.sh unpacks them with `dpkg -x` (or ar + tar)
# into a local prefix: the GPU image has nvcc and the driver but no Debian
# -dev packages and no network.
#
#   sh cuda/fetch-debs.sh [DEST]        default DEST: gpu-bundle/debs
set -eu
DEST=${1:-$(dirname "$0")/../gpu-bundle/debs}
TOP="libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libsystemd-dev libinih-dev \
libpcre2-dev libcmocka-dev libreadline-dev libjansson-dev libmicrohttpd-dev libxxhash-dev"
# Never shipped: the C library and compiler runtime (the GPU image has its
# own, and a second copy would shadow it), and -dev packages other than the
# ones named above (headers of indirect dependencies are never compiled
# against: linking needs their shared libraries only).
SKIP_RE='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|libstdc\+\+6|gcc-12-base|libcrypt1|libnsl2|libtirpc3|libtirpc-common|rpcsvc-proto|icu-devtools|krb5-multidev|libkadm5.*|libkdb5.*|libgssrpc4)$'
command -v apt-get >/dev/null || { echo "fetch-debs: apt-get not found (run this on Debian 12)" >&2; exit 1; }
# The runtime closure of TOP: every Depends / Pre-Depends, not followed
# through the skipped packages (a -dev package's own dependencies are
# headers and tools of other -dev packages: libnorm-dev -> libxml2-dev ->
# ICU, libgnutls28-dev -> DANE, … none of which the link needs) nor through
# Essential ones (dpkg, tar: every Debian-like base has them). One apt-cache
# call per level of the walk.
APTDEP="apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances"
want="" todo=$TOP
while [ -n "$todo" ]; do
    ess=$(apt-cache show --no-all-versions $todo 2>/dev/null | awk '/^Package:/ { p = $2 } /^Essential: yes/ { print p }')
    level=""
    for p in $todo; do
        case " $want $level " in *" $p "*) continue ;; esac
        echo "$p" | grep -Eq "$SKIP_RE" && continue
        case " $ess " in *" $p "*) continue ;; esac
        case "$p" in *-dev) case " $TOP " in *" $p "*) ;; *) continue ;; esac ;; esac
        level="$level $p"
    done
    want="$want$level"
    [ -n "$level" ] || break
    todo=$($APTDEP $level 2>/dev/null | sed -n 's/^ *|\{0,1\}\(Pre\)\{0,1\}Depends: //p' | grep -v '^<' |
           sed 's/:any$//' | sort -u | tr '\n' ' ')
done
mkdir -p "$DEST"
cd "$DEST"
rm -f ./*.deb
echo "fetch-debs: downloading into $(pwd):$want"
apt-get download $want
echo "fetch-debs: $(ls ./*.deb | wc -l) files, $(du -sh . | cut -f1); carry $DEST to the GPU machine"
