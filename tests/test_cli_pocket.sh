#!/usr/bin/env bash
# test_cli_pocket.sh - the `mimi` command with Pocket TTS's Mimi, whose frames are continuous
# latents (32 floats per 80 ms frame) instead of codes.
#
# usage: bash tests/test_cli_pocket.sh MIMI_BINARY GEN_AUDIO_BINARY MODELS_DIR
#
# MODELS_DIR holds pocket.safetensors (`mimi synth --naming pocket`) and native.safetensors (a
# Mimi model with codes). Inputs are generated with tests/gen_audio.c; .npy and .safetensors files
# with bad contents are written byte by byte (no Python). Covers: encode to float32 .npy and
# .safetensors latents with their metadata, streaming and --offline latents agreeing, decode of
# both, live pipes (binary and text, one-frame latency through FIFOs), roundtrip, info, and the
# refusals: a file of the other model family, --codebooks, a wrong latent size, non-finite values,
# broken streams. The Pocket codec costs about 0.1 s per frame here, so the clips are short.
# Prints "ok - ..." / "not ok - ..." per case and a final "N passed, M failed".
set -u

if [ $# -ne 3 ]; then
    echo "usage: bash $0 MIMI_BINARY GEN_AUDIO_BINARY MODELS_DIR" >&2
    exit 2
fi
MIMI=$1
GEN=$2
POCKET=$3/pocket.safetensors
NATIVE=$3/native.safetensors
T=$(mktemp -d) || exit 1
MAIN_PID=$$
trap '[ "$BASHPID" = "$MAIN_PID" ] && rm -rf "$T"' EXIT
export MIMI_MODEL=$POCKET
unset MIMI_PROGRESS

# ---- harness ----

. "$(dirname "$0")/cli_harness.sh"

one_line() { [ "$(wc -l <"$T/stderr")" -eq 1 ] && grep -q '^mimi' "$T/stderr"; }
info_is() { [ "$("$GEN" --info "$1" 2>/dev/null)" = "$2" ]; }
# npy_head PATH: the header dict of a .npy file, spaces removed.
npy_head() { head -c 128 "$1" | tr -d '\0' | tr -d ' '; }
# npy_data_at PATH: the offset of a version 1.0 .npy file's data.
npy_data_at() { echo $((10 + $(od -An -tu2 -j8 -N2 "$1" | tr -d ' '))); }
# npy_floats PATH: the float32 values of a .npy file, one per line.
npy_floats() { od -An -v -tf4 -w4 -j "$(npy_data_at "$1")" "$1" | tr -d ' '; }
# close_enough A B: the float lists in files A and B have the same length and agree within 1e-4
# of their largest magnitude (the streaming and offline paths may round differently).
close_enough() {
    paste "$1" "$2" | awk -F'\t' '
        $1 == "" || $2 == "" { bad = 1 }
        { d = $1 - $2; if (d < 0) d = -d; if (d > worst) worst = d
          m = $1 < 0 ? -$1 : $1; if (m > big) big = m; n++ }
        END { exit (bad || n == 0 || worst > 1e-4 * (big > 1 ? big : 1)) }'
}


# make_npy PATH DESCR ROWS COLS ITEM_BYTES: a .npy array of zeros.
make_npy() {
    local path=$1 rows=$3 cols=$4
    local dict="{'descr': '$2', 'fortran_order': False, 'shape': ($rows, $cols), }"
    local total=$(((10 + ${#dict} + 1 + 63) / 64 * 64))
    {
        printf '\x93NUMPY\x01\x00'; le16 $((total - 10))
        printf '%s%*s\n' "$dict" $((total - 10 - ${#dict} - 1)) ''
        head -c $((rows * cols * $5)) /dev/zero
    } >"$path"
}

# make_st PATH JSON DATA_BYTES: a safetensors file with the given header JSON and DATA_BYTES
# zero bytes of data.
make_st() {
    { le32 ${#2}; le32 0; printf '%s' "$2"; head -c "$3" /dev/zero; } >"$1"
}

# ---- inputs ----

"$GEN" "$T/in.wav" 24000 1 24000 &&  # 1 s -> 13 frames
    "$GEN" "$T/in.flac" 16000 2 2400 || {  # 0.15 s -> 3600 samples at 24 kHz -> 2 frames
    echo "not ok - cannot generate the test inputs"
    echo "0 passed, 1 failed"
    exit 1
}
LAT_BYTES=$((32 * 13 * 4))

# ---- encode ----

run encode "$T/in.wav" -o "$T/lat.npy"
check "encode: float32 .npy latents of shape [32, 13]" eval \
    'rc_is 0 && npy_head "$T/lat.npy" | grep -qF "<f4" &&
        npy_head "$T/lat.npy" | grep -qF "(32,13)" &&
        size_is "$T/lat.npy" $(($(npy_data_at "$T/lat.npy") + LAT_BYTES))'
run encode --offline "$T/in.wav" -o "$T/off.npy"
check "encode --offline: the same shape" eval \
    'rc_is 0 && npy_head "$T/off.npy" | grep -qF "(32,13)" && stderr_has "offline"'
npy_floats "$T/lat.npy" >"$T/lat.txt"
npy_floats "$T/off.npy" >"$T/off.txt"
check "offline and streaming latents agree (clip under 10 s)" eval \
    '[ "$(wc -l <"$T/lat.txt")" -eq 416 ] && close_enough "$T/lat.txt" "$T/off.txt"'

run encode "$T/in.wav" -o "$T/lat.safetensors"
check "encode to .safetensors" eval 'rc_is 0 && [ -f "$T/lat.safetensors" ]'
run info --json "$T/lat.safetensors"
check "its tensor \"latents\" [32, 13] with the metadata of codes files" eval \
    'rc_is 0 && stdout_has "\"kind\": \"latents (.safetensors)\"" && stdout_has "\"shape\": [32, 13]" &&
        stdout_has "\"dtype\": \"float32\"" && stdout_has "\"format\": \"mimi-latents\"" &&
        stdout_has "\"latent_size\": \"32\"" && stdout_has "\"n_samples\": \"24000\"" &&
        stdout_has "\"frame_rate\": \"12.5\"" && stdout_has "\"sample_rate\": \"24000\"" &&
        stdout_has "\"model_family\": \"pocket-tts\"" && stdout_has "\"model_xxh64\": \"" &&
        ! stdout_has "codebook"'
run info "$T/lat.npy"
check "info on a latents .npy: shape and value range" eval \
    'rc_is 0 && stdout_has "latents (.npy)" && stdout_has "[32, 13] (latent size, frames)" &&
        stdout_has "value_range" && ! stdout_has "bitrate"'
run info "$POCKET"
check "info on the Pocket model: family and latent size, no codebooks" eval \
    'rc_is 0 && stdout_has "family        pocket-tts" && stdout_has "latent_size   32" &&
        ! stdout_has "codebook"'

# ---- decode ----

run decode "$T/lat.safetensors" -o "$T/out.wav"
check "decode .safetensors latents, trimmed to the input's 24000 samples" eval \
    'rc_is 0 && info_is "$T/out.wav" "24000 1 24000 wav pcm16"'
run decode --offline --float "$T/lat.npy" -o "$T/off.wav"
check "decode --offline .npy latents: 13 frames of audio" eval \
    'rc_is 0 && info_is "$T/off.wav" "24000 1 24960 wav float"'

# ---- live pipes ----

"$GEN" --raw s16le 1 3000 | "$MIMI" encode -q --raw s16le - >"$T/live.bin" 2>"$T/stderr"
RC=$?
check "encode --raw s16le - : 2 binary frames of 32 float32 (the partial frame flushed)" eval \
    'rc_is 0 && size_is "$T/live.bin" 256'
"$GEN" --raw s16le 1 3000 | "$MIMI" encode -q --raw s16le --text - >"$T/live.txt" 2>"$T/stderr"
RC=$?
check "encode --text: 2 lines of 32 floats" eval \
    'rc_is 0 && [ "$(wc -l <"$T/live.txt")" -eq 2 ] &&
        [ "$(awk "{ n += NF } END { print n }" "$T/live.txt")" -eq 64 ]'
"$MIMI" decode -q --raw s16le - -o - <"$T/live.bin" >"$T/live.s16" 2>"$T/stderr"
RC=$?
check "decode a binary latents stream: 2 frames of PCM" eval 'rc_is 0 && size_is "$T/live.s16" 7680'
"$MIMI" decode -q --text --raw s16le - -o - <"$T/live.txt" >"$T/live_txt.s16" 2>"$T/stderr"
RC=$?
check "decode the text stream: the same audio (text floats read back exactly)" eval \
    'rc_is 0 && cmp -s "$T/live.s16" "$T/live_txt.s16"'
N=$("$GEN" --raw s16le 1 3840 | "$MIMI" encode -q --raw s16le - |
    "$MIMI" decode -q --raw s16le - -o - | wc -c)
check "encode | decode pipe chain: 2 frames through" [ "$N" -eq 7680 ]

mkfifo "$T/fifo"
"$MIMI" encode -q --raw s16le - <"$T/fifo" >"$T/lat1.bin" 2>"$T/stderr" &
PID=$!
exec 3>"$T/fifo"
"$GEN" --raw s16le 1 1920 >&3
S=$(wait_size "$T/lat1.bin" 128)
exec 3>&-
wait $PID
RC=$?
check "encode streams: a frame's latents come out while the input is still open" eval \
    '[ "$S" -eq 128 ] && rc_is 0 && size_is "$T/lat1.bin" 128'
rm -f "$T/fifo" && mkfifo "$T/fifo"
"$MIMI" decode -q --raw s16le - -o - <"$T/fifo" >"$T/lat1.s16" 2>"$T/stderr" &
PID=$!
exec 3>"$T/fifo"
head -c 128 "$T/live.bin" >&3
S=$(wait_size "$T/lat1.s16" 3840)
exec 3>&-
wait $PID
RC=$?
check "decode streams: a frame's audio comes out while the input is still open" eval \
    '[ "$S" -eq 3840 ] && rc_is 0 && size_is "$T/lat1.s16" 3840'

head -c 200 "$T/live.bin" >"$T/cut.bin"
"$MIMI" decode --raw s16le - -o - <"$T/cut.bin" >/dev/null 2>"$T/stderr"
RC=$?
check "a binary stream cut inside a frame: exit 1 naming the frame" eval \
    'rc_is 1 && stderr_has "stdin: the input ends inside frame 1 (72 of its 128 bytes; 32 float32"'
printf '0.5 0.25 -1\n' | "$MIMI" decode --text --raw s16le - -o - >/dev/null 2>"$T/stderr"
RC=$?
check "a text frame with 3 values instead of 32: exit 1 naming the line" eval \
    'rc_is 1 && one_line && stderr_has "stdin: line 1 has 3 values, expected 32"'
{ printf '0'; for _ in $(seq 31); do printf ' inf'; done; echo; } |
    "$MIMI" decode --text --raw s16le - -o - >/dev/null 2>"$T/stderr"
RC=$?
check "an infinite value in a stream: exit 1 naming it" eval \
    'rc_is 1 && one_line && stderr_has "stdin: frame 0: latent value 1 is not a finite number (inf)"'

# ---- roundtrip ----

run roundtrip "$T/in.flac" -o "$T/rt.wav"
check "roundtrip: duration, latents instead of a bitrate, real-time factor and SNR" eval \
    'rc_is 0 && stdout_has "0.15 s of audio" && stdout_has "continuous latents, 32 floats x 12.5 Hz" &&
        ! stdout_has "bit/s" && stdout_has "real-time factor:" && stdout_has "SNR:" &&
        info_is "$T/rt.wav" "24000 1 3600 wav pcm16"'
run roundtrip --json "$T/in.flac"
check "roundtrip --json: latent size, no bitrate" eval \
    'rc_is 0 && stdout_has "\"latent_size\": 32" && stdout_has "\"bitrate\": null" &&
        stdout_has "\"snr_db\": "'

# ---- refusals ----

for cmd in encode roundtrip; do
    run "$cmd" --codebooks 8 "$T/in.flac" -o "$T/cb_$cmd.npy"
    check "$cmd --codebooks with a Pocket model: usage error" eval \
        'rc_is 2 && one_line && stderr_has "--codebooks does not apply to" && absent "$T/cb_$cmd.npy"'
done
run decode --codebooks 8 "$T/lat.npy" -o "$T/cb.wav"
check "decode --codebooks with a Pocket model: usage error" eval \
    'rc_is 2 && one_line && stderr_has "its frames are 32 continuous floats" && absent "$T/cb.wav"'

make_npy "$T/codes.npy" '<i4' 8 2 4
run decode "$T/codes.npy" -o "$T/codes.wav"
check "a codes file with a Pocket model: refused on one line" eval \
    'rc_is 1 && one_line && stderr_has "codes.npy: holds Mimi codes, but" &&
        stderr_has "decode codes with a Mimi model" && absent "$T/codes.wav"'
run decode --model "$NATIVE" "$T/lat.npy" -o "$T/native.wav"
check "a latents file with a Mimi model: refused on one line" eval \
    'rc_is 1 && one_line && stderr_has "lat.npy: holds continuous latents (32 floats per frame)" &&
        stderr_has "decode latents with a Pocket TTS model" && absent "$T/native.wav"'
run decode --model "$NATIVE" "$T/lat.safetensors" -o "$T/native.wav"
check "a latents .safetensors with a Mimi model: refused too" eval \
    'rc_is 1 && one_line && stderr_has "holds continuous latents" && absent "$T/native.wav"'

make_npy "$T/narrow.npy" '<f4' 16 2 4
run decode "$T/narrow.npy" -o "$T/narrow.wav"
check "latents of 16 floats: refused, naming both sizes" eval \
    'rc_is 1 && one_line && stderr_has "has latents of 16 floats, the model'"'"'s have 32" &&
        absent "$T/narrow.wav"'
cp "$T/lat.npy" "$T/nan.npy"
# row 3, frame 5 of [32, 13]: float index 3 * 13 + 5 = 44
printf '\x00\x00\xc0\x7f' | dd of="$T/nan.npy" bs=1 seek=$(($(npy_data_at "$T/nan.npy") + 4 * 44)) \
    conv=notrunc status=none
run decode "$T/nan.npy" -o "$T/nan.wav"
check "a NaN latent in a file: refused, naming its position" eval \
    'rc_is 1 && one_line && stderr_has "nan.npy: latent value 3 of frame 5 is not a finite number (nan)" &&
        absent "$T/nan.wav"'
run info "$T/nan.npy"
check "info counts the non-finite values" eval 'rc_is 0 && stdout_has "non_finite    1"'

LT='"latents":{"dtype":"F32","shape":[32,1],"data_offsets":[0,128]}'
make_st "$T/fmt.safetensors" "{\"__metadata__\":{\"format\":\"mimi-codes\"},$LT}" 128
run decode "$T/fmt.safetensors" -o "$T/fmt.wav"
check "latents whose metadata says codes: refused" eval \
    'rc_is 1 && one_line && stderr_has "not Mimi latents (metadata format '"'"'mimi-codes'"'"')" &&
        absent "$T/fmt.wav"'
make_st "$T/size.safetensors" "{\"__metadata__\":{\"latent_size\":\"16\"},$LT}" 128
run decode "$T/size.safetensors" -o "$T/size.wav"
check "metadata and tensor disagreeing on the latent size: refused" eval \
    'rc_is 1 && one_line && stderr_has "the metadata says latents of 16 floats" && absent "$T/size.wav"'
make_st "$T/i32.safetensors" '{"latents":{"dtype":"I32","shape":[32,1],"data_offsets":[0,128]}}' 128
run decode "$T/i32.safetensors" -o "$T/i32.wav"
check "an integer \"latents\" tensor: refused" eval \
    'rc_is 1 && one_line && stderr_has "tensor \"latents\" is I32, expected F32" && absent "$T/i32.wav"'

check "no temporary files are left behind" no_temp_files

finish
