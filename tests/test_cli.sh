#!/usr/bin/env bash
# test_cli.sh - end-to-end tests of the `mimi` command.
#
# usage: bash tests/test_cli.sh MIMI_BINARY TEST_DATA_DIR MODELS_DIR
#
# Runs the command on the short clip tests/data/dev_sweep_noise.wav (40800 samples = 22 frames)
# and on tiny files written here byte by byte (WAV and .npy headers via printf; no Python), and
# checks exit statuses, messages, output shapes and that failures leave no output behind.
# tests/test_cli_audio.sh covers other formats, pipes, batches, roundtrip and info.
# Prints "ok - ..." / "not ok - ..." per case and a final "N passed, M failed"; exits 1 if any
# case failed. Output values are not compared with reference codes here (test_golden does that).
set -u

if [ $# -ne 3 ]; then
    echo "usage: bash $0 MIMI_BINARY TEST_DATA_DIR MODELS_DIR" >&2
    exit 2
fi
MIMI=$1
DATA=$2
MODEL=$3/native.safetensors
CLIP=$DATA/dev_sweep_noise.wav
FRAMES=22 # ceil(40800 / 1920)
T=$(mktemp -d) || exit 1
MAIN_PID=$$
trap '[ "$BASHPID" = "$MAIN_PID" ] && rm -rf "$T"' EXIT # only the main shell cleans up
unset MIMI_MODEL
HAVE_SOXI=0
command -v soxi >/dev/null 2>&1 && HAVE_SOXI=1

# ---- harness ----

. "$(dirname "$0")/cli_harness.sh"

# The failure is reported on one line (library log lines before it are allowed for model loads).
one_line() { [ "$(wc -l <"$T/stderr")" -eq 1 ] && grep -q '^mimi: ' "$T/stderr"; }

# ---- binary writers ----

# make_wav PATH RATE CHANNELS FRAMES: a 16-bit PCM WAV of silence.
make_wav() {
    local bytes=$(($4 * $3 * 2))
    {
        printf 'RIFF'; le32 $((36 + bytes)); printf 'WAVEfmt '
        le32 16; le16 1; le16 "$3"; le32 "$2"; le32 $(($2 * $3 * 2)); le16 $(($3 * 2)); le16 16
        printf 'data'; le32 "$bytes"
        head -c "$bytes" /dev/zero
    } >"$1"
}

# make_nan_wav PATH: a 32-bit float WAV of two samples, the second one NaN.
make_nan_wav() {
    {
        printf 'RIFF'; le32 44; printf 'WAVEfmt '
        le32 16; le16 3; le16 1; le32 24000; le32 96000; le16 4; le16 32
        printf 'data'; le32 8; printf '\x00\x00\x00\x00\x00\x00\xc0\x7f'
    } >"$1"
}

# make_npy PATH ROWS COLS [DATA_VALUES]: an int32 .npy file (version 1.0) of shape (ROWS, COLS)
# holding the given values (which need not number ROWS * COLS, to make truncated files).
make_npy() {
    local path=$1 rows=$2 cols=$3
    shift 3
    local dict="{'descr': '<i4', 'fortran_order': False, 'shape': ($rows, $cols), }"
    local total=$(((10 + ${#dict} + 1 + 63) / 64 * 64))
    {
        printf '\x93NUMPY\x01\x00'; le16 $((total - 10))
        printf '%s%*s\n' "$dict" $((total - 10 - ${#dict} - 1)) ''
        local v
        for v in "$@"; do le32 "$v"; done
    } >"$path"
}

# ---- readers ----

npy_header_len() {
    od -A n -t u1 -j 8 -N 2 "$1" 2>/dev/null | awk '{ n = $1 + 256 * $2 } END { print n + 0 }'
}
npy_header() { tail -c +11 "$1" | head -c "$(npy_header_len "$1")"; }
# npy_is PATH DESCR SHAPE ITEM_BYTES COUNT: header fields and an exact file size.
npy_is() {
    local h size
    [ -f "$1" ] || return 1
    h=$(npy_header "$1") || return 1
    size=$(wc -c <"$1")
    [[ $h == *"'descr': '$2'"* && $h == *"'shape': $3"* ]] &&
        [ "$size" -eq $((10 + $(npy_header_len "$1") + $4 * $5)) ]
}
# Every int32 of the data section is in [0, 2048) (od prints in host order: little-endian hosts).
codes_in_range() {
    [ -f "$1" ] || return 1
    od -A n -v -t d4 -j $((10 + $(npy_header_len "$1"))) "$1" |
        awk '{ for (i = 1; i <= NF; i++) { n++; if ($i < 0 || $i >= 2048) bad++ } }
             END { exit !(n > 0 && bad == 0) }'
}
# wav_is PATH SAMPLES BITS: mono 24 kHz WAV with SAMPLES frames of BITS bits (soxi if installed,
# else the 44-byte header of libsndfile's 16-bit files).
wav_is() {
    [ -f "$1" ] || return 1
    if [ "$HAVE_SOXI" = 1 ]; then
        [ "$(soxi -s "$1" 2>/dev/null)" = "$2" ] && [ "$(soxi -r "$1" 2>/dev/null)" = 24000 ] &&
            [ "$(soxi -c "$1" 2>/dev/null)" = 1 ] && [ "$(soxi -b "$1" 2>/dev/null)" = "$3" ]
    elif [ "$3" = 16 ]; then
        [ "$(wc -c <"$1")" -eq $((44 + 2 * $2)) ]
    else
        [ "$(wc -c <"$1")" -ge $((44 + 4 * $2)) ] && [ "$(wc -c <"$1")" -le $((200 + 4 * $2)) ]
    fi
}

# ---- general ----

run version
check "version prints a version" eval \
    'rc_is 0 && grep -qE "^mimi [0-9]+\.[0-9]+\.[0-9]+" "$T/stdout"'
run --help
check "--help lists the commands" eval \
    'rc_is 0 && stdout_has encode && stdout_has decode && stdout_has synth'
for sub in encode decode synth; do
    run "$sub" --help
    check "$sub --help shows usage and an example" eval \
        'rc_is 0 && stdout_has "usage: mimi $sub" && stdout_has "example"'
done
run
check "no command is a usage error" rc_is 2
run frobnicate
check "unknown command is a usage error" eval 'rc_is 2 && stderr_has frobnicate'

# ---- encode and decode the clip ----

run encode --model "$MODEL" "$CLIP" -o "$T/stream.npy"
check "encode (streaming) exits 0 with a summary" eval 'rc_is 0 && stderr_has "$FRAMES frames"'
check "encode (streaming) writes int32 [8, $FRAMES]" \
    npy_is "$T/stream.npy" '<i4' "(8, $FRAMES)" 4 $((8 * FRAMES))
check "encode (streaming) codes are in [0, 2048)" codes_in_range "$T/stream.npy"

run encode --offline --model "$MODEL" "$CLIP" -o "$T/offline.npy"
check "encode --offline exits 0" rc_is 0
check "encode --offline writes int32 [8, $FRAMES]" \
    npy_is "$T/offline.npy" '<i4' "(8, $FRAMES)" 4 $((8 * FRAMES))
check "encode --offline codes are in [0, 2048)" codes_in_range "$T/offline.npy"

run decode --model "$MODEL" "$T/stream.npy" -o "$T/out.wav"
check "decode (streaming) exits 0" eval 'rc_is 0 && stderr_has "$FRAMES frames"'
check "decode writes a 16-bit WAV of $FRAMES * 1920 samples" \
    wav_is "$T/out.wav" $((FRAMES * 1920)) 16
check "decode 16-bit WAV has a 44-byte header" eval \
    '[ -f "$T/out.wav" ] && [ "$(wc -c <"$T/out.wav")" -eq $((44 + 2 * FRAMES * 1920)) ]'

run decode --float --model "$MODEL" "$T/stream.npy" -o "$T/out_float.wav"
check "decode --float writes a 32-bit float WAV" eval \
    'rc_is 0 && wav_is "$T/out_float.wav" $((FRAMES * 1920)) 32'

run decode --model "$MODEL" "$T/stream.npy" -o "$T/out.npy"
check "decode to .npy writes float32 [$((FRAMES * 1920))]" eval \
    'rc_is 0 && npy_is "$T/out.npy" "<f4" "($((FRAMES * 1920)),)" 4 $((FRAMES * 1920))'

run decode --offline --model "$MODEL" "$T/offline.npy" -o "$T/out_offline.wav"
check "decode --offline writes $FRAMES * 1920 samples" eval \
    'rc_is 0 && wav_is "$T/out_offline.wav" $((FRAMES * 1920)) 16'

# ---- small inputs: one frame ----

make_wav "$T/one.wav" 24000 1 1920
MIMI_MODEL=$MODEL run encode --quiet "$T/one.wav" -o "$T/env.npy"
check "MIMI_MODEL is used when --model is absent" eval \
    'rc_is 0 && npy_is "$T/env.npy" "<i4" "(8, 1)" 4 8'
check "--quiet prints nothing" eval 'rc_is 0 && [ ! -s "$T/stderr" ]'

run encode --model "$MODEL" --codebooks 4 "$T/one.wav" -o "$T/q4.npy"
check "encode --codebooks 4 writes [4, 1]" eval 'rc_is 0 && npy_is "$T/q4.npy" "<i4" "(4, 1)" 4 4'

run decode --model "$MODEL" --codebooks 2 "$T/env.npy" -o "$T/q2.wav"
check "decode --codebooks 2 of an [8, 1] file" eval 'rc_is 0 && wav_is "$T/q2.wav" 1920 16'

make_wav "$T/stereo.wav" 24000 2 1000
run encode --model "$MODEL" "$T/stereo.wav" -o "$T/stereo.npy"
check "stereo input is downmixed (1000 samples -> [8, 1])" eval \
    'rc_is 0 && npy_is "$T/stereo.npy" "<i4" "(8, 1)" 4 8'

# ---- kernels, weights and backend ----

run encode --model "$MODEL" --isa reference --threads 1 "$T/one.wav" -o "$T/ref.npy"
check "encode --isa reference (the plain C path) writes [8, 1]" eval \
    'rc_is 0 && npy_is "$T/ref.npy" "<i4" "(8, 1)" 4 8'
run decode --model "$MODEL" --weights bf16 "$T/env.npy" -o "$T/bf16.wav"
check "decode --weights bf16 writes 1920 samples" eval 'rc_is 0 && wav_is "$T/bf16.wav" 1920 16'
run encode --model "$MODEL" --isa sse9 "$T/one.wav" -o "$T/isa.npy"
check "an unknown --isa is a usage error" eval 'rc_is 2 && stderr_has "--isa" && absent "$T/isa.npy"'
run encode --model "$MODEL" --weights f8 "$T/one.wav" -o "$T/w.npy"
check "an unknown --weights is a usage error" eval 'rc_is 2 && absent "$T/w.npy"'
run encode --model "$MODEL" --precision half "$T/one.wav" -o "$T/p.npy"
check "an unknown --precision is a usage error" eval 'rc_is 2 && stderr_has "strict, fast, bf16kv, bf16 or int8kv" && absent "$T/p.npy"'
run encode --model "$MODEL" --precision fast "$T/one.wav" -o "$T/p.npy"
check "--precision fast on the CPU is a usage error" eval 'rc_is 2 && stderr_has "--backend cuda" && absent "$T/p.npy"'
run encode --model "$MODEL" --precision strict "$T/one.wav" -o "$T/p.npy"
check "--precision strict runs on the CPU" eval 'rc_is 0 && test -s "$T/p.npy"'
if ! command -v nvidia-smi >/dev/null 2>&1; then
    run encode --model "$MODEL" --backend cuda "$T/one.wav" -o "$T/cuda.npy"
    check "--backend cuda without a GPU: one clear line, no output" eval \
        'rc_is 1 && one_line && stderr_has "no CUDA backend" && absent "$T/cuda.npy"'
fi

# ---- model errors ----

run encode "$T/one.wav" -o "$T/nomodel.npy"
check "no model given: usage error with a hint" eval \
    'rc_is 2 && stderr_has "no model given" && stderr_has "mimi synth" && absent "$T/nomodel.npy"'

run encode --model "$T/missing.safetensors" "$T/one.wav" -o "$T/missing.npy"
check "missing model file: exit 1, one line naming the file" eval \
    'rc_is 1 && one_line && stderr_has "missing.safetensors" && absent "$T/missing.npy"'

head -c 1000 "$MODEL" >"$T/trunc.safetensors"
run encode --model "$T/trunc.safetensors" "$T/one.wav" -o "$T/trunc.npy"
check "truncated model: exit 1, one line naming the file, no output" eval \
    'rc_is 1 && one_line && stderr_has "trunc.safetensors: " && absent "$T/trunc.npy"'

# ---- audio input errors ----

echo "this is not audio" >"$T/in.txt"
run encode --model "$MODEL" "$T/in.txt" -o "$T/txt.npy"
check "text input: exit 1, one line naming the file, no output" eval \
    'rc_is 1 && one_line && stderr_has "in.txt: not a readable audio file" && absent "$T/txt.npy"'

make_wav "$T/empty.wav" 24000 1 0
run encode --model "$MODEL" "$T/empty.wav" -o "$T/empty.npy"
check "zero-length audio: exit 1, empty audio" eval \
    'rc_is 1 && one_line && stderr_has "empty.wav: empty audio" && absent "$T/empty.npy"'

make_wav "$T/cd.wav" 44100 1 100
run encode --model "$MODEL" "$T/cd.wav" -o "$T/cd.npy"
check "44.1 kHz input is resampled, and a note says so" eval \
    'rc_is 0 && stderr_has "cd.wav: 44100 Hz mono -> 24000 Hz mono" &&
        npy_is "$T/cd.npy" "<i4" "(8, 1)" 4 8'

make_nan_wav "$T/nan.wav"
run encode --model "$MODEL" "$T/nan.wav" -o "$T/nan.npy"
check "NaN sample: exit 1 naming the sample" eval \
    'rc_is 1 && one_line && stderr_has "nan.wav: sample 1 of channel 0 is not a finite number" &&
        absent "$T/nan.npy"'

run encode --model "$MODEL" "$T/nonexistent.wav" -o "$T/ne.npy"
check "missing input: exit 1 naming the file" eval \
    'rc_is 1 && one_line && stderr_has "nonexistent.wav"'

# ---- codes input errors ----

make_npy "$T/range.npy" 8 1 0 0 0 5000 0 0 0 0
run decode --model "$MODEL" "$T/range.npy" -o "$T/range.wav"
check "code out of range: exit 1 naming file, value, codebook and frame" eval \
    'rc_is 1 && one_line && stderr_has "range.npy: code 5000 at codebook 3, frame 0" &&
        absent "$T/range.wav"'

make_npy "$T/neg.npy" 2 2 1 2 3 -1
run decode --model "$MODEL" "$T/neg.npy" -o "$T/neg.wav"
check "negative code: exit 1 naming the value" eval \
    'rc_is 1 && stderr_has "code -1 at codebook 1, frame 1" && absent "$T/neg.wav"'

make_npy "$T/q40.npy" 40 1 $(for _ in $(seq 40); do printf '0 '; done)
run decode --model "$MODEL" "$T/q40.npy" -o "$T/q40.wav"
check "40 codebooks: exit 1" eval \
    'rc_is 1 && stderr_has "q40.npy: has 40 codebooks" && absent "$T/q40.wav"'

make_npy "$T/short.npy" 8 2 0 0 0 0 0 0 0 0
run decode --model "$MODEL" "$T/short.npy" -o "$T/short.wav"
check "truncated .npy: exit 1 with the data sizes" eval \
    'rc_is 1 && one_line && stderr_has "short.npy: expected 64 bytes of data, found 32" &&
        absent "$T/short.wav"'

run decode --model "$MODEL" "$T/in.txt" -o "$T/txt.wav"
check "non-.npy codes: exit 1" eval \
    'rc_is 1 && one_line && stderr_has "in.txt: not a codes file" && absent "$T/txt.wav"'

run decode --model "$MODEL" --codebooks 9 "$T/env.npy" -o "$T/q9.wav"
check "decode --codebooks above the file's count: exit 1" eval \
    'rc_is 1 && stderr_has "env.npy" && absent "$T/q9.wav"'

# ---- outputs ----

mkdir -p "$T/sub"
cp "$T/one.wav" "$T/keep.wav" 2>/dev/null
run encode --model "$MODEL" "$T/keep.wav" -o "$T/sub/../keep.wav"
check "-o naming the input is refused and the input kept" eval \
    'rc_is 1 && stderr_has "same file" && cmp -s "$T/one.wav" "$T/keep.wav"'

cp "$T/env.npy" "$T/keep.npy" 2>/dev/null
run decode --model "$MODEL" "$T/keep.npy" -o "$T/./keep.npy"
check "decode -o naming the codes file is refused" eval \
    'rc_is 1 && stderr_has "same file" && cmp -s "$T/env.npy" "$T/keep.npy"'

run encode --model "$MODEL" "$T/one.wav" -o "$T/no/such/dir/codes.npy"
check "output directory missing: exit 1, no file" eval \
    'rc_is 1 && one_line && stderr_has "no/such/dir" && absent "$T/no"'

run decode --model "$MODEL" "$T/env.npy" -o "$T/out.xyz"
check "decode to an unknown extension is a usage error" eval 'rc_is 2 && absent "$T/out.xyz"'

check "no temporary files are left behind" no_temp_files

# ---- usage errors ----

run synth --bogus -o "$T/s.safetensors"
check "synth with an unknown option: exit 2" eval \
    'rc_is 2 && stderr_has "--bogus" && absent "$T/s.safetensors"'
run synth --dtype f64 -o "$T/s.safetensors"
check "synth --dtype f64: exit 2" eval 'rc_is 2 && absent "$T/s.safetensors"'
run synth
check "synth without -o: exit 2" rc_is 2
run encode --model "$MODEL" "$T/one.wav"
check "encode without -o: exit 2" rc_is 2
run encode --model "$MODEL" --codebooks zero "$T/one.wav" -o "$T/x.npy"
check "encode --codebooks zero: exit 2" eval 'rc_is 2 && absent "$T/x.npy"'
run encode --model "$MODEL" "$T/one.wav" "$T/stereo.wav" -o "$T/x.npy"
check "encode with two inputs and a file output: exit 2" eval 'rc_is 2 && absent "$T/x.npy"'
run encode --float --model "$MODEL" "$T/one.wav" -o "$T/x.npy"
check "encode --float (a decode option): exit 2" eval 'rc_is 2 && absent "$T/x.npy"'

finish
