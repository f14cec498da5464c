#!/bin/sh
# The CUDA backend on the SIMT emulator through the programs: qwen35-run
# --backend cuda --device emu gives the CPU backend's greedy ids, a
# 2-stage pipeline whose second stage's config says `backend = cuda`,
# `device = emu` answers as the CPU pipeline does, and a bad --device value is refused
# with one line naming it. Skipped (exit 77) when the emulator is not built in.
set -eu
. "$(dirname "$0")/lib.sh"
setup qwen35-run
if ! "$BIN/qwen35-run" --help 2>&1 | grep -q -- "--device N|emu"; then
    skip "qwen35-run has no --device emu (the SIMT emulator is not built in)"
fi
m=$G/models/tiny-Q8_0.gguf
head -c 100000 "$G/tokens64.txt" | tr -s ' \n' '\n' | sed '/^$/d' | head -n 12 >"$P35_RUN/tok.txt"
cpu=$("$BIN/qwen35-run" -m "$m" --backend cpu --tokens "$P35_RUN/tok.txt" -n 4 2>/dev/null | tr -s ' \n' ' ')
emu=$("$BIN/qwen35-run" -m "$m" --backend cuda --device emu --tokens "$P35_RUN/tok.txt" -n 4 \
      2>"$P35_RUN/run.err" | tr -s ' \n' ' ') || fail "qwen35-run --device emu: $(cat "$P35_RUN/run.err")"
[ -n "$cpu" ] && [ "$emu" = "$cpu" ] || fail "qwen35-run --device emu: [$emu], cpu [$cpu]"
grep -q "cuda" "$P35_RUN/run.err" || fail "qwen35-run --device emu: no cuda backend in its load line: $(cat "$P35_RUN/run.err")"

"$BIN/qwen35-run" -m "$m" --device emu2 --tokens "$P35_RUN/tok.txt" -n 1 >/dev/null 2>"$P35_RUN/bad.err" &&
    fail "--device emu2 accepted"
[ "$(wc -l <"$P35_RUN/bad.err")" = 1 ] && grep -q "device 'emu2'.*0..63 or emu" "$P35_RUN/bad.err" ||
    fail "--device emu2: $(cat "$P35_RUN/bad.err")"
"$BIN/qwen35-stage" --model "$m" --layers 0:8 --bind "ipc://$P35_RUN/x.sock" --device 64 >/dev/null 2>"$P35_RUN/bad.err" &&
    fail "stage --device 64 accepted"
grep -q "device '64'" "$P35_RUN/bad.err" || fail "stage --device 64: $(cat "$P35_RUN/bad.err")"

p35_stage s0 "$m" 0:4 --threads 1 --max-seqs 2 --max-ctx 64 --backend cpu
printf '[stage]\nbackend = cuda\ndevice = emu\n' >"$P35_RUN/s1.conf"      # the INI form
p35_stage s1 "$m" 4:8 --threads 1 --max-seqs 2 --max-ctx 64 --config "$P35_RUN/s1.conf"
p35_coord "$m" s0 s1 -- --max-ctx 64 --max-seqs 2
p35_wait_ready 120
got=$(p35_client --prompt-ids "$P35_RUN/tok.txt" -n 4 --ignore-eos --ids | tr -s ' \n' ' ') ||
    fail "pipeline request failed"
[ "$got" = "$cpu" ] || fail "pipeline with an emu stage: [$got], cpu [$cpu]"
p35_stop
grep -q "cuda" "$P35_RUN/s1.log" || fail "stage s1: no cuda backend in its log: $(cat "$P35_RUN/s1.log")"
ok "emu backend = cpu backend through qwen35-run and a stage"
