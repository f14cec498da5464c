#!/bin/sh
# Start-up errors a restart cannot fix end the daemon with exit 78
# (EX_CONFIG, the units' RestartPreventExitStatus=78) and one line naming
# where: the config file's line or the flag. Each case a real process
# (tiny Q8_0, context_length 4096, 8 layers):
#   stage: max-ctx past the model's context, a tensor of its range missing,
#          a FIFO as model, layers past the model, a bad value (file:line),
#          a half-layer end not L.5, a half-layer past the model, a half
#          range with the cuda backend
#   coordinator: too many stages (more than half-layers; more than 64), max-ctx
#          past the model's context, a bad value (file:line), a --trace file
#          that cannot be created, a stage that
#          serves other layers than its line says (found at the handshake;
#          also at a half-layer), a gap / an overlap at a half-layer
# A model missing a tensor outside a stage's range still serves that range.
set -eu
. "$(dirname "$0")/lib.sh"
setup

# expect NAME WANT-RC PATTERN CMD…: runs CMD (bounded), checks its exit
# status and that its log names PATTERN
expect() {
    _name=$1 _want=$2 _pat=$3
    shift 3
    _rc=0
    timeout 60 "$@" >"$P35_RUN/x.log" 2>&1 || _rc=$?
    if [ "$_rc" -ne "$_want" ]; then
        fail "$_name: exit $_rc, expected $_want ($(tail -n 1 "$P35_RUN/x.log"))"
    elif ! grep -q -- "$_pat" "$P35_RUN/x.log"; then
        fail "$_name: exit $_rc but the log does not say '$_pat': $(tail -n 1 "$P35_RUN/x.log")"
    else
        ok "$_name: exit $_rc: $(grep -- "$_pat" "$P35_RUN/x.log" | head -n 1 | cut -c1-200)"
    fi
}

ST="$BIN/qwen35-stage"
CO="$BIN/qwen35-coordinator"
SB="--bind ipc://$P35_RUN/x.sock --threads 1"

# --- stage ---------------------------------------------------------------
expect "stage max-ctx past the context (flag)" 78 "--max-ctx: max-ctx: 8192 is past the model's context_length 4096" \
    "$ST" --model "$M" --layers 0:4 $SB --max-ctx 8192
printf '[stage]\nmodel = %s\nlayers = 0:4\nbind = ipc://%s/x.sock\nthreads = 1\n\nmax-ctx = 5000\n' "$M" "$P35_RUN" >"$P35_RUN/s.conf"
expect "stage max-ctx past the context (file)" 78 "s.conf:7: max-ctx: 5000 is past" \
    "$ST" --config "$P35_RUN/s.conf"
printf '[stage]\nmodel = %s\nlayers = 0:4\nbind = ipc://%s/x.sock\nmax-seqs = lots\n' "$M" "$P35_RUN" >"$P35_RUN/v.conf"
expect "stage bad value (file)" 78 "v.conf:5: max-seqs" "$ST" --config "$P35_RUN/v.conf"
# the same model with one tensor renamed (same length): blk.5's ssm_a is missing
perl -pe 's/blk\.5\.ssm_a/blk.5.ssm_Z/g' "$M" >"$P35_RUN/miss.gguf"
cmp -s "$M" "$P35_RUN/miss.gguf" && fail "could not make a model with a missing tensor"
expect "stage tensor missing in its range" 78 "model: layers 4:8: .*tensor 'blk.5.ssm_a': missing" \
    "$ST" --model "$P35_RUN/miss.gguf" --layers 4:8 $SB
mkfifo "$P35_RUN/fifo.gguf"
expect "stage FIFO as model" 78 "not a regular file (a FIFO)" \
    "$ST" --model "$P35_RUN/fifo.gguf" --layers 0:4 $SB
expect "stage layers past the model" 78 "layers: 4:12 end past the model's 8 layers" \
    "$ST" --model "$M" --layers 4:12 $SB
# half-layers (L.5: after layer L's mixer): only L.5, and not past the last layer
expect "stage half-layer not L.5 (flag)" 78 "--layers: '0:5.3' is not a layer range A:B (each a layer L, or L.5" \
    "$ST" --model "$M" --layers 0:5.3 $SB
printf '[stage]\nmodel = %s\nbind = ipc://%s/x.sock\nlayers = 4.5:8.5\n' "$M" "$P35_RUN" >"$P35_RUN/h.conf"
expect "stage half-layer with the cuda backend" 78 "--layers: layers: 0:2.5: the cuda backend runs whole layers only" \
    "$ST" --model "$M" --layers 0:2.5 --backend cuda $SB
expect "stage half-layer past the model (file)" 78 "h.conf:4: layers: 4.5:8.5 end past the model's 8 layers" \
    "$ST" --config "$P35_RUN/h.conf"

# a tensor missing outside the range: layers 0:4 of that file serve
p35_stage s0 "$P35_RUN/miss.gguf" 0:4 --threads 1 --max-seqs 2 --max-ctx 256
wait_for "$P35_RUN/s0.log" "serving layers" 60 ||
    fail "layers 0:4 of a model missing a blk.5 tensor did not start: $(tail -n 1 "$P35_RUN/s0.log")"
p35_kill s0 TERM
p35_stage s1 "$M" 0:4 --threads 1 --max-seqs 2 --max-ctx 256

# --- coordinator ---------------------------------------------------------
CB="--listen ipc://$P35_RUN/c.sock"
many=""
i=0
while [ $i -lt 17 ]; do many="$many --stage ipc://$P35_RUN/m$i.sock"; i=$((i + 1)); done
# shellcheck disable=SC2086
expect "coordinator 17 stages for 8 layers" 78 "17 stages for the model's 8 layers (.*): each stage holds at least half a layer" "$CO" --model "$M" $CB $many
many=""
i=0
while [ $i -lt 65 ]; do many="$many --stage ipc://$P35_RUN/m$i.sock"; i=$((i + 1)); done
# shellcheck disable=SC2086
expect "coordinator 65 stages" 78 "65 stages, at most 64" "$CO" --model "$M" $CB $many
expect "coordinator max-ctx past the context" 78 "--max-ctx: max-ctx: 9000 is past the model's context_length 4096" \
    "$CO" --model "$M" $CB --stage "ipc://$P35_RUN/m0.sock" --max-ctx 9000
printf '[coordinator]\nmodel = %s\nlisten = ipc://%s/c.sock\nstage = ipc://%s/m0.sock\nmax-queue = -3\n' \
    "$M" "$P35_RUN" "$P35_RUN" >"$P35_RUN/c.conf"
expect "coordinator bad value (file)" 78 "c.conf:5: max-queue" "$CO" --config "$P35_RUN/c.conf"
expect "coordinator FIFO as model" 78 "not a regular file (a FIFO)" \
    "$CO" --model "$P35_RUN/fifo.gguf" $CB --stage "ipc://$P35_RUN/m0.sock"
expect "coordinator trace file in a missing folder" 78 "trace: $P35_RUN/no/such/dir/t.json: No such file" \
    "$CO" --model "$M" $CB --stage "ipc://$P35_RUN/m0.sock" --trace "$P35_RUN/no/such/dir/t.json"
# the running stage holds 0:4; the line says 0:8 (a single stage): found
# at its handshake, and no restart can fix the config
printf '[coordinator]\nmodel = %s\nlisten = ipc://%s/c.sock\nstage = ipc://%s/s1.sock 0:8\n' \
    "$M" "$P35_RUN" "$P35_RUN" >"$P35_RUN/r.conf"
wait_for "$P35_RUN/s1.log" "serving layers" 60 || fail "stage s1 did not start"
expect "coordinator stage of another range (handshake)" 78 "r.conf:4: stage 0 .*holds layers 0:4, configured 0:8" \
    "$CO" --config "$P35_RUN/r.conf"
# a chain with a gap / an overlap at a half-layer: the line of the stage after it
printf '[coordinator]\nmodel = %s\nlisten = ipc://%s/c.sock\nstage = ipc://%s/m0.sock 0:4.5\nstage = ipc://%s/m1.sock 5:8\n' \
    "$M" "$P35_RUN" "$P35_RUN" "$P35_RUN" >"$P35_RUN/g.conf"
expect "coordinator gap at a half-layer" 78 "g.conf:5: stage: layers 5:8 leave a gap: layers 4.5:5 after" \
    "$CO" --config "$P35_RUN/g.conf"
expect "coordinator overlap at a half-layer" 78 "--stage: stage: layers 3.5:8 overlap 0:4 of the stage at" \
    "$CO" --model "$M" $CB --stage "ipc://$P35_RUN/m0.sock 0:4" --stage "ipc://$P35_RUN/m1.sock 3.5:8"
# the running stage holds 0:4; the line says 0:4.5: found at its handshake
printf '[coordinator]\nmodel = %s\nlisten = ipc://%s/c.sock\nstage = ipc://%s/s1.sock 0:4.5\nstage = ipc://%s/m1.sock 4.5:8\n' \
    "$M" "$P35_RUN" "$P35_RUN" "$P35_RUN" >"$P35_RUN/hr.conf"
expect "coordinator stage of another half range (handshake)" 78 "hr.conf:4: stage 0 .*holds layers 0:4, configured 0:4.5" \
    "$CO" --config "$P35_RUN/hr.conf"

ok "every unfixable start-up error: exit 78 naming where"
