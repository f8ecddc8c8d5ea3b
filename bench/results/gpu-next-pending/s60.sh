#!/bin/bash
# call 2 (tests of the variant V given as $1, v2 or v3; carry .gpu-carry/$V and this script)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
V=${1:-v2}
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/$V/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
date -u +%FT%TZ
timeout 200 .gpu-carry/$V/test_gpu > $OUT/test_gpu.txt 2>&1; T=$?; echo "test_gpu rc $T"; grep -E "FAIL|fail" $OUT/test_gpu.txt | head; tail -1 $OUT/test_gpu.txt
for c in dev_speech_en dev_sweep_noise dev_long_en; do timeout 60 .gpu-carry/$V/test_golden $c native.safetensors all cuda > $OUT/golden-$c.txt 2>&1; echo "golden $c rc $? $(tail -1 $OUT/golden-$c.txt)"; done
timeout 40 .gpu-carry/$V/test_pocket cuda > $OUT/pocket.txt 2>&1; echo "pocket rc $? $(tail -1 $OUT/pocket.txt)"
date -u +%FT%TZ
