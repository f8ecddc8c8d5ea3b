#!/bin/bash
# The tr-xnew builds on a device (bench/results/gpu-h200-2026-12-05.md); carry
# .gpu-carry/pack-x.tar.xz (c9: main's bench; w1, w2: bench and tests of the tr-xnew commits,
# built in /tmp/build-x1 from a worktree at /tmp/wt-x).
#   bash tr-xnew-s60.sh   tests of w2 (and of w1 if w2's test_gpu fails), then ROUNDS (default "1 2 3") interleaved one-stream
#                         runs of c9, w1, w2 (strict), one round of bf16 and int8kv, eager profiles
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
python3 -c "import tarfile; tarfile.open('.gpu-carry/pack-x.tar.xz').extractall('.gpu-carry')" || echo unpack failed
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/c9/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
[ -e /tmp/wt-x ] || ln -s /work/main /tmp/wt-x
mkdir -p /tmp/build-x1; ln -sfn /work/main/build-gpu/models /tmp/build-x1/models
date -u +%FT%TZ
for V in ${TESTS:-w2 w1}; do
  [ $V = w1 ] && [ "$w2_rc" = 0 ] && continue
  timeout 200 .gpu-carry/$V/test_gpu > $OUT/test_gpu-$V.txt 2>&1; rc=$?; [ $V = w2 ] && w2_rc=$rc
  echo "$V test_gpu rc $rc $(tail -1 $OUT/test_gpu-$V.txt)"; grep -A2 FAIL $OUT/test_gpu-$V.txt | head -20
  for c in dev_speech_en dev_sweep_noise dev_long_en; do timeout 60 .gpu-carry/$V/test_golden $c native.safetensors all cuda > /tmp/golden.txt 2>&1; echo "$V golden $c rc $? $(tail -1 /tmp/golden.txt)"; done
  timeout 40 .gpu-carry/$V/test_pocket cuda > /tmp/pocket.txt 2>&1; echo "$V pocket rc $? $(tail -1 /tmp/pocket.txt)"
done
one() { timeout 60 .gpu-carry/$1/mimi-bench-gpu --model $M --modes $2 --quick --max-streams 1 2>&1 | grep -E "one stream, ms|rror|==" | paste -sd" "; }
for r in ${ROUNDS:-1 2 3}; do for v in c9 w1 w2; do echo "== $v $r $(one $v strict)"; done; date -u +%T; done
for v in c9 w1 w2; do echo "== $v $(one $v bf16,int8kv)"; done
for v in c9 w1 w2; do timeout 60 .gpu-carry/$v/mimi-bench-gpu --model $M --modes strict --profile 1 --ops > $OUT/prof-$v.txt 2>&1; echo "prof $v rc $?"; grep -E "by op" $OUT/prof-$v.txt | head -2; done
date -u +%FT%TZ
