#!/bin/sh
# Encodes then decodes the bundled clip with the model in $MIMI_MODEL, or with the synthetic test
# model (written on first use) when none is given.
set -eu
BUILD=${1:-build}
MIMI="$BUILD/mimi"
OUT="$BUILD/demo"
mkdir -p "$OUT"
if [ -z "${MIMI_MODEL:-}" ]; then
    MIMI_MODEL="$BUILD/models/native.safetensors"
    if [ ! -f "$MIMI_MODEL" ]; then
        mkdir -p "$BUILD/models"
        "$MIMI" synth --seed 0 -o "$MIMI_MODEL"
    fi
    echo "demo: no MIMI_MODEL given, using the synthetic test model $MIMI_MODEL."
    echo "demo: its weights are untrained, so the decoded audio is NOT meaningful; set MIMI_MODEL"
    echo "demo: to a real Mimi checkpoint (see README.md) to hear the codec."
fi
export MIMI_MODEL
"$MIMI" encode examples/speech_en.wav -o "$OUT/speech_en.codes.npy"
"$MIMI" decode "$OUT/speech_en.codes.npy" -o "$OUT/speech_en.decoded.wav"
echo "demo: wrote $OUT/speech_en.codes.npy and $OUT/speech_en.decoded.wav"
