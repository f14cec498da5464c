#!/bin/sh
# qwen35-info on the golden models: attention at layers 3 and 7 (SSM
# elsewhere), the right tensor type mix, a --plan that covers every layer
# once; clean errors on bad input; reads what qwen35-mkmodel writes;
# --plan --batch B moves layers to the last stage as B grows; --measure
# times every layer and plans by those times; without --backend the
# stage files name the backend that runs here (cpu without a CUDA device).
set -u
. "$(dirname "$0")/lib.sh"
setup

# model, then "type count" pairs of the expected mix (149 tensors each)
check_model() {
    m=$1; shift
    out=$T/info.txt
    "$BIN/qwen35-info" "$G/models/$m" > "$out" 2> "$T/err" || { fail "$m: exit $? $(cat "$T/err")"; return; }
    [ "$(grep -Ec '^ +[0-9]+ +attn ' "$out")" = 2 ] || fail "$m: not 2 attention layers"
    grep -Eq '^ +3 +attn ' "$out" || fail "$m: layer 3 is not attention"
    grep -Eq '^ +7 +attn ' "$out" || fail "$m: layer 7 is not attention"
    [ "$(grep -Ec '^ +[0-9]+ +ssm ' "$out")" = 6 ] || fail "$m: not 6 SSM layers"
    grep -q 'at layers 3 7$' "$out" || fail "$m: summary does not list attention at 3 7"
    mix=$(sed -n '/^tensor types/,/^per decoded token/p' "$out" | awk 'NF >= 3 && $2 ~ /^[0-9]+$/ { print $1, $2 }' | tr '\n' ' ')
    [ "$mix" = "$* " ] || fail "$m: type mix '$mix', expected '$* '"
}
check_model tiny-Q8_0.gguf   f32 61 q8_0 88
check_model tiny-Q4_K_M.gguf f32 61 q4_K 75 q6_K 13
check_model tiny-Q3_K_M.gguf f32 61 q3_K 61 q4_K 24 q5_K 2 q6_K 1

# --plan 3: three stage files and the coordinator's on stdout, contiguous, covering 0:8
"$BIN/qwen35-info" "$G/models/tiny-Q4_K_M.gguf" --plan 3 > "$T/plan.txt" || fail "--plan 3 exit $?"
ranges=$(grep '^layers = ' "$T/plan.txt" | sed 's/layers = //' | tr '\n' ' ')
[ "$(grep -c '^\[stage\]$' "$T/plan.txt")" = 3 ] || fail "--plan 3: not 3 [stage] sections"
[ "$(grep -c '^# ---- stage-[012].conf$' "$T/plan.txt")" = 3 ] || fail "--plan 3: stage file headers"
[ "$(grep -c '^\[coordinator\]$' "$T/plan.txt")" = 1 ] || fail "--plan 3: no coordinator file"
grep -q "^model = /.*/tiny-Q4_K_M.gguf$" "$T/plan.txt" || fail "--plan 3: model line"
prev=0
for r in $ranges; do
    a=${r%:*}; b=${r#*:}
    [ "$a" = "$prev" ] && [ "$b" -gt "$a" ] || fail "--plan 3: range $r after $prev"
    prev=$b
done
[ "$prev" = 8 ] || fail "--plan 3: ranges '$ranges' do not end at 8"
# the file from the first block is what a stage reads: comments and the keys a stage takes
awk '/^# ---- stage-0.conf/{on=1; next} /^$/{on=0} on' "$T/plan.txt" > "$T/stage-0.conf"
[ "$(grep -vc -e '^#' -e '^\[stage\]$' -e '^model = ' -e '^layers = ' -e '^bind = ' -e '^backend = ' \
     -e '^device = ' -e '^max-seqs = ' -e '^max-ctx = ' "$T/stage-0.conf")" = 0 ] || fail "stage-0 block has other lines"
for k in model layers bind backend device max-seqs max-ctx; do
    grep -q "^$k = " "$T/stage-0.conf" || fail "stage-0 block: no $k"
done
# secure by default: the installed units' local sockets, no plaintext TCP
grep -q '^bind = ipc:///run/qwen35/stage-0.sock$' "$T/stage-0.conf" || fail "stage-0 block: bind $(grep '^bind' "$T/stage-0.conf")"

# will it fit: a device too small names the stage and what to change, writes nothing
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 2 --device-mem 10M --write-configs "$T/none" \
    > "$T/fit.txt" 2> "$T/err" && fail "--device-mem 10M: fits?"
grep -q "DOES NOT FIT" "$T/fit.txt" && grep -q "^qwen35-info: stage 0 (layers 0:[0-9]*) needs .* its device has 10.0 MiB.*--max-seqs.*--plan 3" "$T/err" ||
    fail "--device-mem 10M: $(cat "$T/fit.txt" "$T/err")"
[ ! -e "$T/none" ] || fail "--device-mem 10M: configs written anyway"
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 2 --device-mem 1G,1G,1G > /dev/null 2> "$T/err" && fail "3 sizes for 2 stages"
grep -q -- "--device-mem: 3 sizes for --plan 2" "$T/err" || fail "3 sizes message: $(cat "$T/err")"
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 2 --device-mem 11.2X > /dev/null 2> "$T/err" && fail "11.2X accepted"
grep -q -- "--device-mem '11.2X': item 1: unknown unit" "$T/err" || fail "11.2X message: $(cat "$T/err")"
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 2 --device-mem 1G, > /dev/null 2> "$T/err" && fail "1G, accepted"
grep -q -- "--device-mem '1G,': item 1: nothing after the comma" "$T/err" || fail "1G, message: $(cat "$T/err")"

# the capacity table (with --device-mem): slots x positions that fit, f32
# KV and the f16 planning figure, each the exact edge of what --plan
# accepts: N slots at --max-ctx fit and N + 1 do not; one slot of P
# positions fits and P + 1 does not.
cap() {   # CTX: "slots_f32 slots_f16 positions_f32" of stage 0 at CTX, from --plan 1 --max-ctx CTX
    "$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 1 --device-mem 128M --max-ctx "$1" 2>/dev/null |
        awk -v ctx="$1" '/^# slots x positions/ { on = 1 }
            on && $2 == "stage" { for (i = 5; i <= NF; i++) if ($i == ctx) col = i - 5 }
            on && $2 == "0" && col != "" { print $(7 + 3 * col), $(9 + 3 * col), $(NF - 2); exit }'
}
fits() {  # OPTIONS...: whether stage 0 fits 128M
    "$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 1 --device-mem 128M "$@" 2>/dev/null | grep -q '^#   0 .* fits$'
}
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 1 --device-mem 128M > "$T/cap.txt" 2>&1
grep -q "f16 KV: NOT IMPLEMENTED" "$T/cap.txt" || fail "capacity: f16 KV not labelled as not implemented: $(cat "$T/cap.txt")"
row=$(cap 2048)
set -- $row
n32=${1:-}; n16=${2:-}; p32=${3:-}
case "$n32$n16$p32" in *[!0-9]*|'') fail "capacity row '$row'"; n32= ;; esac
if [ -n "$n32" ] && [ "$n32" -ge 1 ]; then
    [ "$n16" -gt "$n32" ] || fail "capacity: f16 KV fits $n16 slots, f32 $n32"
    fits --max-ctx 2048 --max-seqs "$n32" || fail "capacity: $n32 slots x 2048 said to fit, --plan says no"
    fits --max-ctx 2048 --max-seqs $((n32 + 1)) && fail "capacity: $((n32 + 1)) slots x 2048 fit, table said $n32"
    fits --max-ctx "$p32" --max-seqs 1 || fail "capacity: 1 slot x $p32 said to fit, --plan says no"
    fits --max-ctx $((p32 + 1)) --max-seqs 1 && fail "capacity: 1 slot x $((p32 + 1)) fits, table said $p32"
else
    fail "capacity: no slot of 2048 fits 128M: '$row'"
fi

# the written files start the pipeline as they are, and each stage's own
# load line reports the weights and slot state the plan printed; the same
# with --half-layers (a stage may end after a layer's mixer: 3 stages of
# the 8 layers balance on a half-layer)
planned() {   # K [more qwen35-info options]: plan, write, start, check
    k=$1
    shift
    port=$(free_ports $((k + 1)) | cut -d' ' -f1)   # the coordinator's, then one a stage
    rm -rf "$T/cfg"
    "$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan "$k" --max-seqs 3 --max-ctx 512 --device-mem 1G \
        --backend cpu --port $port --write-configs "$T/cfg" "$@" > "$T/w.txt" 2> "$T/err" || fail "--write-configs: $(cat "$T/err")"
    pids=""
    for s in $(seq 0 $((k - 1))); do
        [ -s "$T/cfg/stage-$s.conf" ] || fail "--write-configs $*: stage-$s.conf missing"
        "$BIN/qwen35-stage" --config "$T/cfg/stage-$s.conf" --threads 1 > "$T/s$s.log" 2>&1 &
        pids="$pids $!"
    done
    [ -s "$T/cfg/coordinator.conf" ] || fail "--write-configs $*: coordinator.conf missing"
    "$BIN/qwen35-coordinator" --config "$T/cfg/coordinator.conf" > "$T/c.log" 2>&1 &
    pids="$pids $!"
    # up: the last stage (ending at layer 8) and every other one
    up=0
    for _ in $(seq 1 150); do
        st=$("$BIN/qwen35-client" --endpoint "tcp://127.0.0.1:$port" --status 2>/dev/null) || st=""
        if printf '%s\n' "$st" | grep -q "^$((k - 1)) .* [0-9.]*:8 .*yes" &&
           [ "$(printf '%s\n' "$st" | grep -Ec '^[0-9]+ .* yes ')" = "$k" ]; then up=1; break; fi
        sleep 0.2
    done
    [ $up = 1 ] || fail "planned pipeline ($k $*) not up: $(cat "$T"/s*.log "$T/c.log")"
    "$BIN/qwen35-client" --endpoint "tcp://127.0.0.1:$port" -n 4 --ids hello > "$T/ids" 2> "$T/err" &&
        [ "$(wc -w < "$T/ids")" -ge 1 ] || fail "planned pipeline ($k $*): request failed: $(cat "$T/err")"
    for s in $(seq 0 $((k - 1))); do
        row=$(grep "^#   $s " "$T/w.txt")
        want_w=$(echo "$row" | awk '{ print $4, $5 }'); want_s=$(echo "$row" | awk '{ print $6, $7 }')
        grep -q "loaded layers .*: weights $want_w resident, slot state $want_s (3 slots x 512 positions)" "$T/s$s.log" ||
            fail "stage $s ($k $*): plan says weights $want_w, state $want_s; its log: $(grep loaded "$T/s$s.log")"
    done
    # (--port writes plaintext TCP with insecure = yes: that WARN is expected)
    grep WARN "$T/c.log" | grep -qv "WARN: INSECURE" && fail "planned pipeline ($k $*): coordinator warns: $(grep WARN "$T/c.log")"
    grep -q "WARN: INSECURE" "$T/c.log" || fail "planned pipeline ($k $*): insecure = yes without its WARN line"
    for p in $pids; do kill "$p" 2>/dev/null; done
    for p in $pids; do wait "$p" 2>/dev/null; done
}
planned 2
planned 3 --half-layers
cat "$T"/cfg/stage-*.conf | grep -q '^layers = [0-9]*\.5:' || fail "--plan 3 --half-layers: no range starts at a half-layer: $(cat "$T"/cfg/stage-*.conf | grep '^layers')"
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 3 --half-layers --backend cuda > /dev/null 2> "$T/err" && fail "--half-layers with cuda accepted"
grep -q -- "--half-layers: the cuda backend runs whole layers only" "$T/err" || fail "--half-layers cuda message: $(cat "$T/err")"

# no --backend: the backend that runs here (cuda only with a usable CUDA
# device; a stage of a cuda plan on a machine without one fails to start)
here=cpu
[ -x "$BIN/qwen35-gpucheck" ] && "$BIN/qwen35-gpucheck" devices >/dev/null 2>&1 && here=cuda
rm -rf "$T/auto"
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 2 --write-configs "$T/auto" > /dev/null 2> "$T/err" ||
    fail "--plan 2 --write-configs: $(cat "$T/err")"
for s in 0 1; do
    grep -qx "backend = $here" "$T/auto/stage-$s.conf" ||
        fail "--plan 2 on a machine with backend $here: stage-$s.conf says $(grep '^backend' "$T/auto/stage-$s.conf")"
done

# bad input: one line on stderr naming the problem, non-zero exit
"$BIN/qwen35-info" "$G/models/tiny-Q8_0.gguf" --plan 9 > /dev/null 2> "$T/err" && fail "--plan 9 accepted"
grep -q -- "--plan 9: expected 1..8" "$T/err" || fail "--plan 9 message: $(cat "$T/err")"
"$BIN/qwen35-info" "$G/tokenizer/qwen3-vocab.gguf" > /dev/null 2> "$T/err" && fail "vocab-only accepted"
grep -q "qwen3-vocab.gguf: .*key 'qwen35moe.block_count': missing" "$T/err" || fail "vocab-only message: $(cat "$T/err")"
head -c 30000 "$G/models/tiny-Q8_0.gguf" > "$T/cut.gguf"
"$BIN/qwen35-info" "$T/cut.gguf" > /dev/null 2> "$T/err" && fail "truncated file accepted"
[ "$(wc -l < "$T/err")" = 1 ] && grep -q "cut.gguf: .*past the end of the file" "$T/err" || fail "truncated message: $(cat "$T/err")"

# a tensor a stage would refuse (renamed: missing; the name keeps its length)
perl -0777 -pe 's/blk\.2\.ssm_norm\.weight/blk.2.ssm_nxrm.weight/' "$G/models/tiny-Q8_0.gguf" > "$T/renamed.gguf"
"$BIN/qwen35-info" "$T/renamed.gguf" > /dev/null 2> "$T/err" && fail "model with a missing tensor accepted"
[ "$(wc -l < "$T/err")" = 1 ] && grep -q "renamed.gguf: tensor 'blk.2.ssm_norm.weight': missing (a stage refuses" "$T/err" ||
    fail "missing tensor message: $(cat "$T/err")"

# reads what the generator writes
"$BIN/qwen35-mkmodel" --preset micro --types q8_0 -o "$T/micro.gguf" 2> /dev/null || fail "mkmodel micro"
"$BIN/qwen35-info" "$T/micro.gguf" --plan 2 > "$T/micro.txt" || fail "info on micro: exit $?"
grep -Eq '^ +1 +attn ' "$T/micro.txt" || fail "micro: layer 1 is not attention"

# the MTP head: its config, and --plan puts it (and token_embd) on the last stage
"$BIN/qwen35-mkmodel" --preset micro --types q8_0 --mtp -o "$T/mtp.gguf" 2> /dev/null || fail "mkmodel --mtp"
"$BIN/qwen35-info" "$T/mtp.gguf" --plan 2 > "$T/mtp.txt" 2> "$T/err" || fail "info on an MTP model: exit $? $(cat "$T/err")"
grep -q '^  layers        2 main + 1 MTP, ' "$T/mtp.txt" || fail "MTP model: layer count line"
grep -q '^mtp head (block 2: full attention + MoE' "$T/mtp.txt" || fail "MTP model: no mtp head section"
grep -Eq '^  eh_proj       \[128, 64\] q8_0 ' "$T/mtp.txt" || fail "MTP model: eh_proj line: $(grep eh_proj "$T/mtp.txt")"
grep -q 'the output norm, LM head and MTP head\.$' "$T/mtp.txt" || fail "MTP model: last stage does not say it holds the head"

# --plan --batch: a micro-batch of B sequences reads the union of its
# experts (E*(1-(1-k/E)^B) per layer) but the LM head once, so as B grows
# the split gives the last stage more layers. A micro model with 64
# experts (2 used) and a 4000-token vocabulary, where that shows: the head
# weighs about 6 layers for one token and about 2 for eight.
"$BIN/qwen35-mkmodel" --preset micro --layers 8 --experts 64 --vocab 4000 -o "$T/moe.gguf" 2> /dev/null ||
    fail "mkmodel micro 8 layers 64 experts"
last_layers() {   # B: layers of the last stage of --plan 2 --batch B
    "$BIN/qwen35-info" "$T/moe.gguf" --plan 2 --batch "$1" > "$T/b$1.txt" 2> "$T/err" ||
        { fail "--batch $1: exit $? $(cat "$T/err")"; echo 0; return; }
    r=$(sed -n 's/^layers = //p' "$T/b$1.txt" | tail -n 1)
    echo $(( ${r#*:} - ${r%:*} ))
}
n1=$(last_layers 1); n4=$(last_layers 4); n8=$(last_layers 8)
[ "$n1" = 1 ] && [ "$n4" = 2 ] && [ "$n8" = 3 ] ||
    fail "--plan 2 --batch 1/4/8: last stage has $n1/$n4/$n8 layers, expected 1/2/3"
grep -q '^# plan: 2 stages, bytes read per decoded token$' "$T/b1.txt" || fail "--batch 1: plan header changed"
grep -q '^# plan: 2 stages, bytes read per decode step of a micro-batch of 8 sequences (14.4 of 64 experts per layer)$' \
    "$T/b8.txt" || fail "--batch 8: plan header: $(grep '^# plan' "$T/b8.txt")"
grep -q '^  layers .*(14.4 distinct experts of 64 per layer, expected)$' "$T/b8.txt" ||
    fail "--batch 8: no per-step summary with 64*(1-(62/64)^8) = 14.4 experts"
# --measure: a time for every layer, and a plan covering 0:8 (the times
# themselves are the machine's; nothing checks their values)
"$BIN/qwen35-info" "$T/moe.gguf" --plan 2 --batch 4 --measure > "$T/m.txt" 2> "$T/err" ||
    fail "--measure: exit $? $(cat "$T/err")"
[ "$(grep -Ec '^#   layer +[0-7]  (ssm|attn) +[0-9]+\.[0-9] ms' "$T/m.txt")" = 8 ] || fail "--measure: not 8 layer times"
grep -q '^# plan: 2 stages, measured time per decode step of a micro-batch of 4 sequences$' "$T/m.txt" ||
    fail "--measure: plan header"
[ "$(sed -n 's/^layers = //p' "$T/m.txt" | tr '\n' ' ')" != "" ] &&
    sed -n 's/^layers = //p' "$T/m.txt" | head -n 1 | grep -q '^0:[1-7]$' &&
    sed -n 's/^layers = //p' "$T/m.txt" | tail -n 1 | grep -q '^[1-7]:8$' || fail "--measure: ranges $(grep '^layers' "$T/m.txt")"
# bad flags: one line naming the flag
"$BIN/qwen35-info" "$T/moe.gguf" --plan 2 --batch 0 > /dev/null 2> "$T/err" && fail "--batch 0 accepted"
grep -q "^qwen35-info: --batch: 0 is out of range \[1, 4096\]" "$T/err" || fail "--batch 0 message: $(cat "$T/err")"
"$BIN/qwen35-info" "$T/moe.gguf" --measure > /dev/null 2> "$T/err" && fail "--measure without --plan accepted"
grep -q "^qwen35-info: --measure needs --plan N$" "$T/err" || fail "--measure message: $(cat "$T/err")"
"$BIN/qwen35-info" "$T/moe.gguf" --plan 2 --threads 2 > /dev/null 2> "$T/err" && fail "--threads without --measure accepted"
grep -q "^qwen35-info: --threads applies to --measure only$" "$T/err" || fail "--threads message: $(cat "$T/err")"

# --plan --draft K: the last stage also runs the MTP head (its block over
# the step's rows, then one row per draft), so it takes fewer layers than
# without drafts; the files turn mtp on there and set the coordinator's
# draft, and the pipeline they start drafts
"$BIN/qwen35-mkmodel" --preset micro --layers 8 --mtp -o "$T/mtp8.gguf" 2> /dev/null || fail "mkmodel micro 8 layers --mtp"
plan_last() {   # DRAFT: layers of the last stage of --plan 2 --batch 4 --draft DRAFT
    "$BIN/qwen35-info" "$T/mtp8.gguf" --plan 2 --batch 4 --draft "$1" > "$T/d$1.txt" 2> "$T/err" ||
        { fail "--draft $1: exit $? $(cat "$T/err")"; echo 0; return; }
    r=$(sed -n 's/^layers = //p' "$T/d$1.txt" | tail -n 1)
    echo $(( ${r#*:} - ${r%:*} ))
}
d0=$(plan_last 0); d2=$(plan_last 2)
[ "$d2" -lt "$d0" ] || fail "--plan 2 --draft 2: the last stage has $d2 layers, without drafts $d0: the head's drafting not counted"
grep -q 'each verifying 2 drafts .*the last stage also runs the MTP head: [0-9.]* [kM]B a step$' "$T/d2.txt" ||
    fail "--draft 2: plan header: $(grep '^# plan' "$T/d2.txt")"
grep -q 'MTP head drafting' "$T/d2.txt" || fail "--draft 2: the last stage's line does not say it drafts"
[ "$(grep -c '^mtp = on$' "$T/d2.txt")" = 1 ] && [ "$(grep -c '^draft = 2$' "$T/d2.txt")" = 1 ] ||
    fail "--draft 2: files without one mtp = on and one draft = 2"
grep -q '^mtp = on$' "$T/d0.txt" && fail "--draft 0: mtp = on written"
port=$(free_ports 3 | cut -d' ' -f1)
rm -rf "$T/dcfg"
"$BIN/qwen35-info" "$T/mtp8.gguf" --plan 2 --batch 4 --draft 2 --max-seqs 2 --max-ctx 256 --backend cpu \
    --port "$port" --write-configs "$T/dcfg" > /dev/null 2> "$T/err" || fail "--draft 2 --write-configs: $(cat "$T/err")"
awk '/^\[stage\]/{on=1} on && /^mtp = on$/{print FILENAME}' "$T/dcfg/stage-1.conf" | grep -q . ||
    fail "--draft 2: stage-1.conf without mtp = on"
dp=""
for s in 0 1; do
    "$BIN/qwen35-stage" --config "$T/dcfg/stage-$s.conf" --threads 1 > "$T/ds$s.log" 2>&1 &
    dp="$dp $!"
done
"$BIN/qwen35-coordinator" --config "$T/dcfg/coordinator.conf" > "$T/dc.log" 2>&1 &
dp="$dp $!"
out=""
for _ in $(seq 1 150); do
    out=$("$BIN/qwen35-client" --endpoint "tcp://127.0.0.1:$port" -n 8 --ignore-eos --json hello 2>/dev/null) && break
    out=""
    sleep 0.2
done
for p in $dp; do kill "$p" 2>/dev/null; done
fin=$(printf '%s\n' "$out" | grep '"event":"final"')
[ -n "$fin" ] || fail "--draft 2 pipeline: no answer: $(cat "$T"/ds*.log "$T/dc.log" | tail -n 5)"
drafted=$(printf '%s\n' "$fin" | sed -n 's/.*"drafted":\([0-9]*\).*/\1/p')
[ "${drafted:-0}" -gt 0 ] || fail "--draft 2 pipeline: no drafts verified: $fin"

ok "models, plans, measures, bad input"
