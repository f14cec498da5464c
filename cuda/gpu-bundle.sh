#!/bin/sh
# gpu-bundle.sh [DIR] — `make gpu-bundle`: everything `sh cuda/gpu-check.sh`
# needs on a lent GPU machine that has nvcc, a driver and a C compiler but no
# Debian -dev packages and no network, in one git-ignored folder (default
# gpu-bundle/; carry it with the working tree: one run takes 64 MiB):
#
#   DIR/debs/    the daemon libraries' .debs (cuda/fetch-debs.sh; fetched
#                again only when fetch-debs.sh changed)
#   DIR/golden/  the golden subset that fits: tokens64.txt, quant/ (every
#                decoder's blocks), the Q4_K_M and Q3_K_M models with their
#                expect/ files. tiny-Q8_0 (31.7 MB) does not fit: gpu-check
#                generates a tiny Q8_0 model there with qwen35-mkmodel and
#                takes the CPU backend's logits as its reference.
#   DIR/MANIFEST sizes; fails when bundle + working tree pass LIMIT_MIB (60).
#
# Env: GOLDEN (default ../shared/golden), LIMIT_MIB.
set -eu
cd "$(dirname "$0")/.."
DIR=${1:-gpu-bundle}
GOLDEN=${GOLDEN:-../shared/golden}
LIMIT_MIB=${LIMIT_MIB:-60}
MODELS="tiny-Q4_K_M tiny-Q3_K_M"
[ -f "$GOLDEN/tokens64.txt" ] || { echo "gpu-bundle: no golden data at $GOLDEN (GOLDEN=dir)" >&2; exit 1; }
mkdir -p "$DIR"
if [ ! -f "$DIR/debs/.done" ] || [ cuda/fetch-debs.sh -nt "$DIR/debs/.done" ]; then
    rm -rf "$DIR/debs"
    sh cuda/fetch-debs.sh "$DIR/debs"
    touch "$DIR/debs/.done"
else
    echo "gpu-bundle: $DIR/debs up to date ($(ls "$DIR"/debs/*.deb | wc -l) .debs)"
fi
rm -rf "$DIR/golden"
mkdir -p "$DIR/golden/models" "$DIR/golden/expect" "$DIR/golden/quant"
cp "$GOLDEN/tokens64.txt" "$DIR/golden/"
cp "$GOLDEN"/quant/* "$DIR/golden/quant/"
for m in $MODELS; do
    cp "$GOLDEN/models/$m.gguf" "$DIR/golden/models/"
    cp "$GOLDEN/expect/$m".* "$DIR/golden/expect/"
done
chmod -R u+w "$DIR/golden"
# what one run carries: tracked + untracked-not-ignored files, and this folder
tree=$(git ls-files -co --exclude-standard -z | xargs -0 cat 2>/dev/null | wc -c)
bundle=$(du -sb "$DIR" | cut -f1)
total=$((tree + bundle))
{
    echo "gpu-bundle $(date -u +%Y-%m-%dT%H:%MZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "debs:   $(du -sb "$DIR/debs" | cut -f1) bytes, $(ls "$DIR"/debs/*.deb | wc -l) files"
    echo "golden: $(du -sb "$DIR/golden" | cut -f1) bytes ($MODELS + tokens64 + quant; tiny-Q8_0 generated on the device)"
    echo "tree:   $tree bytes (git ls-files -co --exclude-standard)"
    echo "total:  $total bytes = $((total / 1048576)) MiB of $LIMIT_MIB"
} > "$DIR/MANIFEST"
cat "$DIR/MANIFEST"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
    echo "gpu-bundle: FAIL: bundle + working tree $total bytes > $LIMIT_MIB MiB" >&2
    exit 1
fi
echo "gpu-bundle: ok: carry $DIR with the working tree (run's carry: [\"$DIR\"]), then: sh cuda/gpu-check.sh"
