#!/bin/sh
# bench_preset.sh PRESET BIN_DIR GOLDEN — the model file a benchmark runs on
# for BENCH_PRESET=PRESET, generated on first use; prints its path.
#   mini      the make bench model: 4 layers of the 35B-A3B's sizes, 64
#             experts, the real Qwen3 vocabulary (1.0 GB, under build/models)
#   mini-12L  the make bench-pipeline model: the same with 12 layers (2.2 GB)
#   35b-a3b   the full 35B-A3B shape: 40 layers, 256 experts, vocab 248320
#             (21.2 GB), written once to BENCH_DIR (default $TMPDIR or
#             /var/tmp) and kept there for later runs
# Exit 3 with a message naming what is short when the disk cannot hold the
# file or the memory cannot hold its pages (the callers skip the bench);
# exit 1 on any other failure.
set -eu
PRESET=${1:?usage: bench_preset.sh PRESET BIN_DIR GOLDEN}
BIN=${2:?bin dir}
GOLDEN=${3:?golden dir}
VOCAB=$GOLDEN/tokenizer/qwen3-vocab.gguf
me=bench-preset

case $PRESET in
mini)     out=$(dirname "$BIN")/models/mini-q4_k_m.gguf
          set -- --preset mini --layers 4 --experts 64 --types q4_k_m ;;
mini-mtp) out=$(dirname "$BIN")/models/mini-mtp-q4_k_m.gguf
          set -- --preset mini --layers 4 --experts 64 --types q4_k_m --mtp ;;
mini-12L) out=$(dirname "$BIN")/models/mini-12L-64x-q4_k_m.gguf
          set -- --preset mini --layers 12 --experts 64 --types q4_k_m ;;
35b-a3b)  dir=${BENCH_DIR:-${TMPDIR:-/var/tmp}}
          out=$dir/qwen35-bench-35b-a3b-q4_k_m.gguf
          set -- --preset 35b-a3b --types q4_k_m ;;
35b-a3b-mtp) dir=${BENCH_DIR:-${TMPDIR:-/var/tmp}}
          out=$dir/qwen35-bench-35b-a3b-mtp-q4_k_m.gguf
          set -- --preset 35b-a3b --types q4_k_m --mtp ;;
*)        echo "$me: BENCH_PRESET=$PRESET: expected mini, mini-12L or 35b-a3b (-mtp: with the MTP head)" >&2; exit 1 ;;
esac
# the full-size file carries its own generated 248320-token vocabulary
case $PRESET in 35b-a3b*) ;; *) [ -f "$VOCAB" ] && set -- "$@" --vocab-from "$VOCAB" ;; esac

if [ "${PRESET%-mtp}" = 35b-a3b ]; then
    need=21300   # MB: the file qwen35-mkmodel writes for this preset (21.2 GB)
    # Memory: the benches map the file and read all of it per pass; with
    # less memory than the file the page cache thrashes and the figures
    # measure the disk. Kept: the file plus 1 GB for everything else.
    mem=$(awk '$1 == "MemTotal:" { printf "%d", $2 / 1000 }' /proc/meminfo)
    if [ "$mem" -lt $((need + 1000)) ]; then
        echo "$me: skipped: BENCH_PRESET=35b-a3b needs $((need + 1000)) MB of memory for the ${need} MB file and the rest; this machine has $mem MB (MemTotal)" >&2
        exit 3
    fi
    if [ ! -f "$out" ]; then
        mkdir -p "$dir" || { echo "$me: cannot create $dir (BENCH_DIR)" >&2; exit 1; }
        free=$(df -Pm "$dir" | awk 'NR == 2 { print $4 }')
        if [ "$free" -lt $((need + 1000)) ]; then
            echo "$me: skipped: BENCH_PRESET=35b-a3b writes a ${need} MB file to $dir (BENCH_DIR), which has $free MB free" >&2
            exit 3
        fi
    fi
fi

if [ ! -f "$out" ]; then
    [ -x "$BIN/qwen35-mkmodel" ] || { echo "$me: $BIN/qwen35-mkmodel missing (run make first)" >&2; exit 1; }
    mkdir -p "$(dirname "$out")"
    echo "$me: generating $out: qwen35-mkmodel $*" >&2
    "$BIN/qwen35-mkmodel" "$@" -o "$out" >&2 || { echo "$me: qwen35-mkmodel failed" >&2; exit 1; }
fi
echo "$out"
