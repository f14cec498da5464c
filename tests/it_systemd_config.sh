#!/bin/sh
# Bad configurations refuse to start: exit status 78 (EX_CONFIG, which the
# units list in RestartPreventExitStatus=) and exactly one line on stderr
# naming the file, the line and the problem. Runs the real daemons.
set -u
. "$(dirname "$0")/lib.sh"
setup

# refuse PROG NAME LINE EXPECTED_TEXT CONFIG: CONFIG's lines are separated
# by '|'; @MODEL@ and @T@ stand for the model and the temp dir
refuse() {
    prog=$1 name=$2 line=$3 want=$4
    conf="$T/$name.conf"
    printf '%s\n' "$5" | tr '|' '\n' | sed "s|@MODEL@|$MODEL|g; s|@T@|$T|g" > "$conf"
    timeout 20 "$BIN/$prog" --config "$conf" > "$T/out" 2> "$T/err"
    rc=$?
    n=$(wc -l < "$T/err")
    if [ $rc -ne 78 ] || [ "$n" -ne 1 ] || ! grep -qF -- "$conf:$line: " "$T/err" || ! grep -qF -- "$want" "$T/err"; then
        fail "$prog $name: exit $rc (want 78), $n stderr lines (want 1), want '$conf:$line: ...$want...': $(sed 's/^/  | /' "$T/err")"
    fi
    ok "$prog $name: $(cat "$T/err")"
}

refuse qwen35-stage typo-key 3 "unknown key 'layrs' in [stage] (did you mean 'layers'?)" '[stage]|model = @MODEL@|layrs = 0:8|bind = ipc://@T@/s.sock'
refuse qwen35-stage bad-value 4 "max-seqs: 'sixteen' is not an integer" '[stage]|model = @MODEL@|layers = 0:8|max-seqs = sixteen|bind = ipc://@T@/s.sock'
refuse qwen35-stage missing-model 2 "model: /nonexistent/qwen35.gguf: No such file or directory" '[stage]|model = /nonexistent/qwen35.gguf|layers = 0:8|bind = ipc://@T@/s.sock'
refuse qwen35-stage range-past-model 3 "layers: 4:12 end past the model's 8 layers" '[stage]|model = @MODEL@|layers = 4:12|bind = ipc://@T@/s.sock'
refuse qwen35-stage bad-endpoint 4 "bind: 'tcp://nohost' is not a ZeroMQ endpoint" '[stage]|model = @MODEL@|layers = 0:8|bind = tcp://nohost'

# CURVE keys (qwen35-keygen): a secret key others can read, a key of the
# wrong length, a key that is not Z85.
if [ -x "$BIN/qwen35-keygen" ]; then
"$BIN/qwen35-keygen" "$T/st" > /dev/null && "$BIN/qwen35-keygen" "$T/co" > /dev/null
cp "$T/st.key" "$T/open.key" && chmod 0644 "$T/open.key"
cp "$T/co.pub" "$T/clients"
head -c 39 "$T/co.pub" > "$T/short.pub"
sed 's/^\(.\{20\}\)./\1,/' "$T/co.pub" > "$T/notz85.pub"
refuse qwen35-stage curve-key-readable 5 "curve-secret-key: $T/open.key: secret key readable by others (mode 0644): chmod 600" '[stage]|model = @MODEL@|layers = 0:8|bind = ipc://@T@/s.sock|curve-secret-key = @T@/open.key|curve-clients = @T@/clients'
refuse qwen35-stage curve-client-short 6 "curve-clients: $T/short.pub:1: not a CURVE public key: 39 characters" '[stage]|model = @MODEL@|layers = 0:8|bind = ipc://@T@/s.sock|curve-secret-key = @T@/st.key|curve-clients = @T@/short.pub'
refuse qwen35-coordinator curve-stage-key-not-z85 6 "stage-key: $T/notz85.pub: not a CURVE public key: character 21 (0x2c) is not Z85" '[coordinator]|model = @MODEL@|listen = ipc://@T@/c.sock|stage = ipc://@T@/s0.sock 0:8|curve-secret-key = @T@/co.key|stage-key = @T@/notz85.pub'
else
    fail "qwen35-keygen not built"
fi

if [ -x "$BIN/qwen35-coordinator" ]; then
refuse qwen35-coordinator overlapping-ranges 5 "layers 3:8 overlap 0:4 of the stage at $T/overlapping-ranges.conf:4" '[coordinator]|model = @MODEL@|listen = ipc://@T@/c.sock|stage = ipc://@T@/s0.sock 0:4|stage = ipc://@T@/s1.sock 3:8'
refuse qwen35-coordinator gapped-ranges 5 "leave a gap: layers 4:5 after the stage at" '[coordinator]|model = @MODEL@|listen = ipc://@T@/c.sock|stage = ipc://@T@/s0.sock 0:4|stage = ipc://@T@/s1.sock 5:8'
refuse qwen35-coordinator short-of-model 5 "the last stage ends at layer 6; layers 6:8 of the model" '[coordinator]|model = @MODEL@|listen = ipc://@T@/c.sock|stage = ipc://@T@/s0.sock 0:4|stage = ipc://@T@/s1.sock 4:6'
refuse qwen35-coordinator typo-key 3 "unknown key 'max-queu' in [coordinator] (did you mean 'max-queue'?)" '[coordinator]|model = @MODEL@|max-queu = 8|listen = ipc://@T@/c.sock|stage = ipc://@T@/s0.sock 0:8'
else
    fail "qwen35-coordinator not built"
fi
