#!/bin/sh
# Runs the CUDA backend's tests and benchmark on a GPU machine and keeps the logs in $OUT.
#
# The binaries come prebuilt in $BIN (test_gpu, test_golden, mimi-bench-gpu, built with
# -DMIMI_CUDA=ON for sm_90); they look for the test data and models at the absolute paths they
# were built with (MIMI_TEST_DATA, MIMI_TEST_MODELS under SRC), so SRC is linked to this tree.
#   usage: OUT=dir BIN=dir SRC=/work/main BUILD=build-gpu sh bench/run_gpu.sh [tests|bench|all] [bench args]
set -u
what=${1:-all}
[ $# -gt 0 ] && shift
OUT=${OUT:-gpu-out}
BIN=${BIN:-.gpu-carry}
SRC=${SRC:-/work/main}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
here=$(pwd)

# the tree where the binaries expect it, and the synthetic model where the tests expect it
if [ "$here" != "$SRC" ] && [ ! -e "$SRC" ]; then mkdir -p "$(dirname "$SRC")" && ln -s "$here" "$SRC"; fi
# cuBLAS from the CUDA toolkit, or from the Python wheels
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/lib; do
    if [ -e "$d/libcublas.so.13" ]; then LIBDIR=$d; break; fi
done
if [ -z "${LIBDIR:-}" ]; then
    f=$(find /usr /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)
    [ -n "$f" ] && LIBDIR=$(dirname "$f")
fi
export LD_LIBRARY_PATH="${LIBDIR:-}:${LD_LIBRARY_PATH:-}"
{
    date -u; uname -a; nvidia-smi; echo "cuBLAS from: ${LIBDIR:-not found}"
    ldd "$BIN/test_gpu"
} > "$OUT/machine.txt" 2>&1
mkdir -p "$SRC/$BUILD/models"
[ -e "$SRC/$BUILD/models/native.safetensors" ] ||
    "$BIN/mimi-bench-gpu" --write-model "$SRC/$BUILD/models/native.safetensors" > "$OUT/model.txt" 2>&1

status=0
if [ "$what" = tests ] || [ "$what" = all ]; then
    timeout 120 "$BIN/test_gpu" > "$OUT/test_gpu.log" 2>&1
    rc=$?
    echo "test_gpu: exit $rc" | tee -a "$OUT/summary.txt"
    [ $rc -eq 0 ] || status=1
    for clip in dev_speech_en dev_sweep_noise dev_long_en; do
        timeout 100 "$BIN/test_golden" $clip native.safetensors all cuda > "$OUT/golden_$clip.log" 2>&1
        rc=$?
        echo "golden cuda $clip: exit $rc" | tee -a "$OUT/summary.txt"
        [ $rc -eq 0 ] || status=1
    done
    grep -h "rel_l2\|codes equal\|FAIL\|expected\|checks" "$OUT"/test_gpu.log "$OUT"/golden_*.log | head -80
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
    timeout ${BENCH_TIMEOUT:-200} "$BIN/mimi-bench-gpu" --model "$SRC/$BUILD/models/native.safetensors" "$@" > "$OUT/bench.log" 2>&1
    echo "bench: exit $?" | tee -a "$OUT/summary.txt"
    cat "$OUT/bench.log"
fi
exit $status
