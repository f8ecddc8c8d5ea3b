#!/usr/bin/env bash
# test_cli_audio.sh - the `mimi` command as audio people use it, end to end.
#
# usage: bash tests/test_cli_audio.sh MIMI_BINARY GEN_AUDIO_BINARY MODELS_DIR
#
# Inputs are generated here with tests/gen_audio.c (libsndfile; no sox, no Python): a 44.1 kHz
# stereo MP3, an 8 kHz FLAC, a 24 kHz float WAV, Ogg Vorbis and Opus files, and headerless PCM.
# Covers resampling and downmix, every output format, .npy and .safetensors codes with their
# metadata checks, live pipes (including one-frame latency through FIFOs and a reader that goes
# away), roundtrip, info, batches with --jobs and a failing file, --json, the progress bar, and
# every bad input the command must refuse with one line, a non-zero status and no output.
# Codec work is kept to a few dozen 80 ms frames in all.
# Prints "ok - ..." / "not ok - ..." per case and a final "N passed, M failed".
set -u

if [ $# -ne 3 ]; then
    echo "usage: bash $0 MIMI_BINARY GEN_AUDIO_BINARY MODELS_DIR" >&2
    exit 2
fi
MIMI=$1
GEN=$2
MODEL=$3/native.safetensors
OTHER_MODEL=$3/native_f16.safetensors
HF_MODEL=$3/hf.safetensors
T=$(mktemp -d) || exit 1
MAIN_PID=$$
trap '[ "$BASHPID" = "$MAIN_PID" ] && rm -rf "$T"' EXIT
export MIMI_MODEL=$MODEL
unset MIMI_PROGRESS

# ---- harness ----

. "$(dirname "$0")/cli_harness.sh"

one_line() { [ "$(wc -l <"$T/stderr")" -eq 1 ] && grep -q '^mimi: ' "$T/stderr"; }
info_is() { [ "$("$GEN" --info "$1" 2>/dev/null)" = "$2" ]; }
# npy_shape PATH: the shape text of a .npy header, e.g. "(8, 7)".
npy_shape() { head -c 128 "$1" | tr -d '\0' | grep -ao "'shape': ([0-9, ]*)" | cut -d: -f2 | tr -d ' '; }


# make_st PATH JSON DATA_BYTES...: a safetensors file with the given header JSON and data bytes
# (each a value 0..255).
make_st() {
    local path=$1 json=$2
    shift 2
    {
        le32 ${#json}; le32 0; printf '%s' "$json"
        local b
        for b in "$@"; do printf "\\x$(printf %02x "$b")"; done
    } >"$path"
}

# make_npy16 PATH ROWS COLS VALUES...: an int16 .npy file.
make_npy16() {
    local path=$1 rows=$2 cols=$3
    shift 3
    local dict="{'descr': '<i2', 'fortran_order': False, 'shape': ($rows, $cols), }"
    local total=$(((10 + ${#dict} + 1 + 63) / 64 * 64))
    {
        printf '\x93NUMPY\x01\x00'; le16 $((total - 10))
        printf '%s%*s\n' "$dict" $((total - 10 - ${#dict} - 1)) ''
        local v
        for v in "$@"; do le16 "$v"; done
    } >"$path"
}

# make_float_wav PATH HEX_SAMPLE: a 24 kHz float WAV of two samples, the second given as 8 hex
# digits of its little-endian bytes (0000c07f: NaN, 0000807f: +inf).
make_float_wav() {
    local b=$2
    {
        printf 'RIFF'; le32 44; printf 'WAVEfmt '
        le32 16; le16 3; le16 1; le32 24000; le32 96000; le16 4; le16 32
        printf 'data'; le32 8; printf '\x00\x00\x00\x00'
        printf "\\x${b:0:2}\\x${b:2:2}\\x${b:4:2}\\x${b:6:2}"
    } >"$1"
}

# ---- inputs ----

"$GEN" "$T/in.mp3" 44100 2 8820 &&  # 0.2 s -> 4800 samples at 24 kHz -> 3 frames
    "$GEN" "$T/in8k.flac" 8000 1 1200 &&  # 0.15 s -> 3600 samples -> 2 frames
    "$GEN" "$T/float.wav" 24000 1 1920 float &&  # 1 frame
    "$GEN" "$T/vorbis.ogg" 16000 1 1200 &&  # 1 frame each
    "$GEN" "$T/opus.opus" 48000 2 3840 || {
    echo "not ok - cannot generate the test inputs"
    echo "0 passed, 1 failed"
    exit 1
}

# ---- any audio in ----

run encode "$T/in.mp3" -o "$T/mp3.safetensors"
check "MP3 44.1 kHz stereo: encoded, with a note of the conversion" eval \
    'rc_is 0 && stderr_has "in.mp3: 44100 Hz stereo -> 24000 Hz mono" && [ -f "$T/mp3.safetensors" ]'
run info --json "$T/mp3.safetensors"
check "its codes file: [8, 3] with the sample count and model hash in the metadata" eval \
    'rc_is 0 && stdout_has "\"shape\": [8, 3]" && stdout_has "\"n_samples\": \"4800\"" &&
        stdout_has "\"model_xxh64\": \"" && stdout_has "\"source\": \"in.mp3\""'

run encode "$T/in8k.flac" -o "$T/flac.npy"
check "FLAC 8 kHz: resampled, [8, 2] int32 .npy" eval \
    'rc_is 0 && stderr_has "8000 Hz mono -> 24000 Hz mono" && [ "$(npy_shape "$T/flac.npy")" = "(8,2)" ]'

run encode "$T/float.wav" -o "$T/float.npy"
check "float WAV at 24 kHz: no conversion note, [8, 1]" eval \
    'rc_is 0 && ! stderr_has " -> 24000" && [ "$(npy_shape "$T/float.npy")" = "(8,1)" ]'

# ---- many files at once, one of them bad ----

echo "not audio" >"$T/bad.txt"
mkdir -p "$T/batch"
cp "$T/vorbis.ogg" "$T/opus.opus" "$T/batch/"
run encode --jobs 2 --json "$T/batch/vorbis.ogg" "$T/bad.txt" "$T/batch/opus.opus" -o "$T/codes/"
check "batch: the bad file is reported, the others are encoded, exit 1" eval \
    'rc_is 1 && stderr_has "bad.txt: not a readable audio file" && [ -f "$T/codes/vorbis.npy" ] &&
        [ -f "$T/codes/opus.npy" ] && absent "$T/codes/bad.npy" && stderr_has "encoded 2 of 3 files"'
check "batch --json: a summary on stdout" eval \
    'stdout_has "\"succeeded\": 2" && stdout_has "\"failed\": 1" && stdout_has "\"input_rate\": 48000"'

run encode --format safetensors "$T/batch/vorbis.ogg" "$T/batch/opus.opus" -o "$T/codes2/"
check "batch --format safetensors, all good: exit 0" eval \
    'rc_is 0 && [ -f "$T/codes2/vorbis.safetensors" ] && [ -f "$T/codes2/opus.safetensors" ]'

run encode "$T/batch/vorbis.ogg" "$T/batch/opus.opus" -o "$T/notadir.npy"
check "several inputs and a file output: usage error" eval 'rc_is 2 && absent "$T/notadir.npy"'

# whole files, several per library call (the default on a GPU): the same codes as one at a time
cp "$T/float.wav" "$T/in8k.flac" "$T/batch/"
run encode --offline "$T/batch/vorbis.ogg" "$T/batch/float.wav" "$T/batch/in8k.flac" "$T/batch/opus.opus" \
    -o "$T/one/"
run encode --offline --group 3 --json "$T/batch/vorbis.ogg" "$T/batch/float.wav" "$T/bad.txt" \
    "$T/batch/in8k.flac" "$T/batch/opus.opus" -o "$T/grouped/"
check "encode --offline --group 3: the bad file reported, the others as encoded one at a time" eval \
    'rc_is 1 && stderr_has "bad.txt: not a readable audio file" && stdout_has "\"succeeded\": 4" &&
        cmp -s "$T/one/vorbis.npy" "$T/grouped/vorbis.npy" && cmp -s "$T/one/float.npy" "$T/grouped/float.npy" &&
        cmp -s "$T/one/in8k.npy" "$T/grouped/in8k.npy" && cmp -s "$T/one/opus.npy" "$T/grouped/opus.npy" &&
        absent "$T/grouped/bad.npy"'
run decode --offline "$T/one/vorbis.npy" "$T/one/float.npy" "$T/one/in8k.npy" -o "$T/dec_one/"
run decode --offline --group 3 "$T/one/vorbis.npy" "$T/bad.txt" "$T/one/float.npy" "$T/one/in8k.npy" \
    -o "$T/dec_grouped/"
check "decode --offline --group 3: the bad file reported, the others as decoded one at a time" eval \
    'rc_is 1 && cmp -s "$T/dec_one/vorbis.wav" "$T/dec_grouped/vorbis.wav" &&
        cmp -s "$T/dec_one/float.wav" "$T/dec_grouped/float.wav" && cmp -s "$T/dec_one/in8k.wav" "$T/dec_grouped/in8k.wav" &&
        absent "$T/dec_grouped/bad.wav" && stderr_has "decoded 3 of 4 files"'
run encode --group 2 "$T/batch/vorbis.ogg" "$T/batch/opus.opus" -o "$T/nogroup/"
check "--group without --offline: usage error" eval 'rc_is 2 && stderr_has "--group needs --offline"'

# ---- audio out ----

run decode "$T/mp3.safetensors" -o "$T/out.flac"
check "decode to FLAC, trimmed to the input's 4800 samples" eval \
    'rc_is 0 && info_is "$T/out.flac" "24000 1 4800 flac pcm16"'
run decode --rate 48000 "$T/mp3.safetensors" -o "$T/out48.wav"
check "decode --rate 48000 to WAV" eval 'rc_is 0 && info_is "$T/out48.wav" "48000 1 9600 wav pcm16"'
run decode "$T/flac.npy" -o "$T/out.opus"
check "decode to Ogg/Opus" eval \
    'rc_is 0 && "$GEN" --info "$T/out.opus" | grep -q "^24000 1 .* opus$"'
run decode --float "$T/float.npy" -o "$T/out.ogg"
check "decode to Ogg Vorbis" eval 'rc_is 0 && "$GEN" --info "$T/out.ogg" | grep -q "^24000 1 .* vorbis$"'
run decode --rate 44100 "$T/flac.npy" -o "$T/bad.opus"
check "Opus at 44.1 kHz is refused before any work" eval \
    'rc_is 1 && one_line && stderr_has "bad.opus: Opus holds" && absent "$T/bad.opus"'
run decode "$T/flac.npy" -o "$T/out.xyz"
check "unknown output extension: usage error" eval 'rc_is 2 && absent "$T/out.xyz"'

# ---- codes files ----

make_npy16 "$T/i16.npy" 2 1 5 2047
run decode "$T/i16.npy" -o "$T/i16.wav"
check "int16 .npy codes decode" eval 'rc_is 0 && info_is "$T/i16.wav" "24000 1 1920 wav pcm16"'

run decode --model "$OTHER_MODEL" "$T/mp3.safetensors" -o "$T/other.wav"
check "codes from another model file are refused" eval \
    'rc_is 1 && one_line && stderr_has "mp3.safetensors: was encoded with another model" &&
        stderr_has "--any-model" && absent "$T/other.wav"'
run decode --model "$OTHER_MODEL" --any-model -q "$T/mp3.safetensors" -o "$T/other.wav"
check "--any-model decodes them anyway" eval 'rc_is 0 && [ -f "$T/other.wav" ]'

ST_TENSOR='"codes":{"dtype":"I32","shape":[1,1],"data_offsets":[0,4]}'
make_st "$T/rate.safetensors" \
    "{\"__metadata__\":{\"format\":\"mimi-codes\",\"sample_rate\":\"16000\"},$ST_TENSOR}" 1 0 0 0
run decode "$T/rate.safetensors" -o "$T/rate.wav"
check "codes for another sample rate are refused" eval \
    'rc_is 1 && one_line && stderr_has "rate.safetensors: the codes are for 16000 Hz audio" &&
        absent "$T/rate.wav"'
make_st "$T/count.safetensors" "{\"__metadata__\":{\"n_codebooks\":\"4\"},$ST_TENSOR}" 1 0 0 0
run decode "$T/count.safetensors" -o "$T/count.wav"
check "metadata and tensor disagreeing on the codebook count are refused" eval \
    'rc_is 1 && one_line && stderr_has "the metadata says 4 codebooks" && absent "$T/count.wav"'
make_st "$T/card.safetensors" "{\"__metadata__\":{\"codebook_size\":\"1024\"},$ST_TENSOR}" 1 0 0 0
run decode "$T/card.safetensors" -o "$T/card.wav"
check "codes for another codebook size are refused" eval \
    'rc_is 1 && stderr_has "codebooks of 1024 entries" && absent "$T/card.wav"'
make_st "$T/oor.safetensors" "{$ST_TENSOR}" 0 8 0 0  # 2048
run decode "$T/oor.safetensors" -o "$T/oor.wav"
check "an out-of-range code in a .safetensors file is refused" eval \
    'rc_is 1 && one_line && stderr_has "code 2048 at codebook 0, frame 0 is out of range" &&
        absent "$T/oor.wav"'
run decode "$MODEL" -o "$T/model.wav"
check "a model given as codes: says so" eval \
    'rc_is 1 && one_line && stderr_has "not a codes file (no tensor \"codes\"" && absent "$T/model.wav"'

# ---- live pipes ----

"$GEN" --raw s16le 1 3000 | "$MIMI" encode -q --raw s16le - >"$T/live.bin" 2>"$T/stderr"
RC=$?
check "encode --raw s16le - : 2 binary frames of 8 int32 (the partial frame flushed)" eval \
    'rc_is 0 && size_is "$T/live.bin" 64'
"$GEN" --raw f32le 2 3000 | "$MIMI" encode -q --raw f32le --channels 2 --text - >"$T/live.txt" \
    2>"$T/stderr"
RC=$?
check "encode --raw f32le --channels 2 --text: 2 lines of 8 codes" eval \
    'rc_is 0 && [ "$(wc -l <"$T/live.txt")" -eq 2 ] && [ "$(awk "{ n += NF } END { print n }" "$T/live.txt")" -eq 16 ]'
"$MIMI" decode -q --raw s16le - -o - <"$T/live.bin" >"$T/live.s16" 2>"$T/stderr"
RC=$?
check "decode --raw s16le - -o - : 2 frames of 16-bit PCM" eval 'rc_is 0 && size_is "$T/live.s16" 7680'
"$MIMI" decode -q --text --raw f32le - -o - <"$T/live.txt" >"$T/live.f32" 2>"$T/stderr"
RC=$?
check "decode --text --raw f32le: 2 frames of float PCM" eval 'rc_is 0 && size_is "$T/live.f32" 15360'
"$MIMI" decode -q - -o "$T/live.wav" <"$T/live.bin" 2>"$T/stderr"
RC=$?
check "decode a binary stream into a WAV file" eval 'rc_is 0 && info_is "$T/live.wav" "24000 1 3840 wav pcm16"'
N=$("$GEN" --raw s16le 1 3840 | "$MIMI" encode -q --raw s16le - |
    "$MIMI" decode -q --raw s16le - -o - | wc -c)
check "encode | decode pipe chain: 2 frames through" [ "$N" -eq 7680 ]

# One frame in, the FIFO still open: its codes (32 bytes) must come out before the input ends.
mkfifo "$T/fifo"
"$MIMI" encode -q --raw s16le - <"$T/fifo" >"$T/lat.bin" 2>"$T/stderr" &
PID=$!
exec 3>"$T/fifo"
"$GEN" --raw s16le 1 1920 >&3
S=$(wait_size "$T/lat.bin" 32)
exec 3>&-
wait $PID
RC=$?
check "encode streams: a frame's codes come out while the input is still open" eval \
    '[ "$S" -eq 32 ] && rc_is 0 && size_is "$T/lat.bin" 32'
rm -f "$T/fifo" && mkfifo "$T/fifo"
"$MIMI" decode -q --raw s16le - -o - <"$T/fifo" >"$T/lat.s16" 2>"$T/stderr" &
PID=$!
exec 3>"$T/fifo"
head -c 32 "$T/live.bin" >&3
S=$(wait_size "$T/lat.s16" 3840)
exec 3>&-
wait $PID
RC=$?
check "decode streams: a frame's audio comes out while the input is still open" eval \
    '[ "$S" -eq 3840 ] && rc_is 0 && size_is "$T/lat.s16" 3840'

# SIGTERM while the output is being written: exit 130 and neither output nor temporary file.
rm -f "$T/fifo" && mkfifo "$T/fifo"
"$MIMI" decode -q - -o "$T/int.wav" <"$T/fifo" 2>"$T/stderr" &
PID=$!
exec 3>"$T/fifo"
head -c 32 "$T/live.bin" >&3
for _ in $(seq 300); do
    [ -n "$(find "$T" -name 'int.wav.tmp.*' -print)" ] && break
    sleep 0.1
done
sleep 0.2
kill -TERM $PID
wait $PID
RC=$?
exec 3>&-
check "SIGTERM: exit 130, the partial output removed" eval \
    'rc_is 130 && stderr_has "stdin: interrupted" && absent "$T/int.wav" && no_temp_files'

# A reader that goes away: one line, exit 1, no death by SIGPIPE.
"$GEN" --raw s16le 1 19200 2>/dev/null | "$MIMI" encode -q --raw s16le - 2>"$T/stderr" | head -c 1 >/dev/null
RC=${PIPESTATUS[1]}
check "encode into a closed pipe: broken pipe reported, exit 1" eval \
    'rc_is 1 && one_line && stderr_has "stdout: write failed (broken pipe"'

head -c 33 "$T/live.bin" >"$T/cut.bin"
"$MIMI" decode --raw s16le - -o - <"$T/cut.bin" >/dev/null 2>"$T/stderr"
RC=$?
check "a binary stream cut inside a frame: exit 1 naming the frame" eval \
    'rc_is 1 && stderr_has "stdin: the input ends inside frame 1"'
printf '1 2 3 4 5 6 7\n' | "$MIMI" decode --text --raw s16le - -o - >/dev/null 2>"$T/stderr"
RC=$?
check "a text frame with 7 codes instead of 8: exit 1 naming the line" eval \
    'rc_is 1 && one_line && stderr_has "stdin: line 1 has 7 codes, expected 8"'
printf '1 2 3 4 5 6 7 9999\n' | "$MIMI" decode --text --raw s16le - -o - >/dev/null 2>"$T/stderr"
RC=$?
check "a streamed code out of range: exit 1" eval \
    'rc_is 1 && one_line && stderr_has "frame 0: code 9999 at codebook 7 is out of range"'
: | "$MIMI" encode --raw s16le - >/dev/null 2>"$T/stderr"
RC=$?
check "empty PCM on stdin: empty audio" eval 'rc_is 1 && one_line && stderr_has "stdin: empty audio"'
printf '\x00\x00\x00\x00\x00\x00\xc0\x7f' | "$MIMI" encode --raw f32le - >/dev/null 2>"$T/stderr"
RC=$?
check "NaN in f32le PCM on stdin: refused" eval \
    'rc_is 1 && one_line && stderr_has "stdin: sample 1 of channel 0 is not a finite number (nan)"'

# ---- roundtrip ----

run roundtrip "$T/in8k.flac" -o "$T/rt.wav"
check "roundtrip: duration, bitrate, real-time factor and SNR" eval \
    'rc_is 0 && stdout_has "0.15 s of audio" && stdout_has "1100 bit/s" &&
        stdout_has "real-time factor:" && stdout_has "SNR:" && info_is "$T/rt.wav" "24000 1 3600 wav pcm16"'
run roundtrip --json --codebooks 4 "$T/float.wav"
check "roundtrip --json" eval \
    'rc_is 0 && stdout_has "\"bitrate\": 550" && stdout_has "\"snr_db\": " && stdout_has "\"real_time_factor\": "'

# ---- info ----

run info "$MODEL"
check "info on a model: naming, geometry, parameters, hash" eval \
    'rc_is 0 && stdout_has "naming        kyutai" && stdout_has "codebooks     32" &&
        stdout_has "parameters    96151393" && stdout_has "F32 (318 tensors)" &&
        grep -qE "xxh64 +[0-9a-f]{16}$" "$T/stdout"'
run info --json "$HF_MODEL" "$T/flac.npy" "$T/in.mp3"
check "info --json on a model, a codes file and audio" eval \
    'rc_is 0 && stdout_has "\"naming\": \"huggingface\"" && stdout_has "\"shape\": [8, 2]" &&
        stdout_has "\"sample_rate\": 44100" && stdout_has "\"channels\": 2"'
run info "$T/bad.txt"
check "info on something else: one line, exit 1" eval \
    'rc_is 1 && one_line && stderr_has "bad.txt: not a Mimi model, a codes file or audio"'

# ---- progress bar and quiet ----

MIMI_PROGRESS=always run encode "$T/in8k.flac" -o "$T/p.npy"
check "progress bar (forced with MIMI_PROGRESS=always)" eval \
    'rc_is 0 && stderr_has "mimi encode [" && stderr_has "100%"'
run encode -q "$T/in8k.flac" -o "$T/q.npy"
check "--quiet: nothing on stderr" eval 'rc_is 0 && [ ! -s "$T/stderr" ]'

# ---- bad inputs ----

run encode "$T/nothing.wav" -o "$T/nothing.npy"
check "missing input: one line, exit 1, no output" eval \
    'rc_is 1 && one_line && stderr_has "nothing.wav: cannot open" && absent "$T/nothing.npy"'
run encode "$T/batch" -o "$T/dir.npy"
check "a directory as input: one line" eval 'rc_is 1 && one_line && stderr_has "batch: is a directory"'
run encode "$T/bad.txt" -o "$T/bad.npy"
check "not audio: one line" eval 'rc_is 1 && one_line && stderr_has "bad.txt: not a readable audio file"'
"$GEN" "$T/empty.wav" 48000 2 0 float
run encode "$T/empty.wav" -o "$T/empty.npy"
check "empty float WAV: empty audio" eval 'rc_is 1 && one_line && stderr_has "empty.wav: empty audio" && absent "$T/empty.npy"'
make_float_wav "$T/inf.wav" 0000807f
run encode "$T/inf.wav" -o "$T/inf.npy"
check "infinite sample: refused" eval \
    'rc_is 1 && one_line && stderr_has "inf.wav: sample 1 of channel 0 is not a finite number (inf)" &&
        absent "$T/inf.npy"'
run encode --model "$T/mp3.safetensors" "$T/float.wav" -o "$T/wrong.npy"
check "a codes file as the model: one line naming it" eval \
    'rc_is 1 && one_line && stderr_has "mp3.safetensors: not a usable Mimi model" && absent "$T/wrong.npy"'
run decode --model "$T/bad.txt" "$T/flac.npy" -o "$T/wrong.wav"
check "a text file as the model: one line" eval 'rc_is 1 && one_line && stderr_has "bad.txt" && absent "$T/wrong.wav"'
head -c 100000 "$MODEL" >"$T/trunc.safetensors"
run roundtrip --model "$T/trunc.safetensors" "$T/float.wav"
check "a truncated model: one line" eval 'rc_is 1 && one_line && stderr_has "trunc.safetensors: "'
run encode "$T/float.wav" -o "$MODEL"
check "the model file as the output: refused" eval 'rc_is 1 && stderr_has "is the model file"'
cp "$T/flac.npy" "$T/keep.npy"
run decode "$T/keep.npy" -o "$T/./keep.npy"
check "an input as the output: refused, the input kept" eval \
    'rc_is 1 && stderr_has "same file" && cmp -s "$T/flac.npy" "$T/keep.npy"'

check "no temporary files are left behind" no_temp_files

# ---- help ----

for sub in encode decode roundtrip info synth; do
    run "$sub" --help
    check "$sub --help: usage and examples" eval 'rc_is 0 && stdout_has "usage: mimi $sub" && stdout_has "example"'
done

finish
