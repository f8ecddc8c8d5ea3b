#!/bin/bash
# call 2 (tests; carry .gpu-carry/pack.tar.xz and .gpu-carry/s60.sh): bash s60.sh V [V2 ...] runs
# test_gpu, test_golden on three clips and test_pocket of each variant named (v2, v3, v6, v7, v8
# have test binaries in the pack)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
python3 -c "import tarfile; tarfile.open('.gpu-carry/pack.tar.xz').extractall('.gpu-carry')" || echo unpack failed
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/c9/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
# the variants' tests look for their models where they were built
for d in /tmp/build-v3 /tmp/build-v6 /tmp/build-v7 /tmp/build-v8; do mkdir -p $d; ln -sfn /work/main/build-gpu/models $d/models; done
for V in "$@"; do
  date -u +%FT%TZ
  timeout 200 .gpu-carry/$V/test_gpu > $OUT/test_gpu-$V.txt 2>&1; T=$?; echo "$V test_gpu rc $T"; grep -E "FAIL|fail" $OUT/test_gpu-$V.txt | head; tail -1 $OUT/test_gpu-$V.txt
  for c in dev_speech_en dev_sweep_noise dev_long_en; do timeout 60 .gpu-carry/$V/test_golden $c native.safetensors all cuda > /tmp/golden.txt 2>&1; echo "$V golden $c rc $? $(tail -1 /tmp/golden.txt)"; cat /tmp/golden.txt >> $OUT/golden-$V.txt; done
  timeout 40 .gpu-carry/$V/test_pocket cuda > $OUT/pocket-$V.txt 2>&1; echo "$V pocket rc $? $(tail -1 $OUT/pocket-$V.txt)"
done
date -u +%FT%TZ
