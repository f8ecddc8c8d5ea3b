#!/bin/bash
# The run of bench/results/h200-main-pending.md, carrying .gpu-carry/pack-h.tar.xz (n: main, m1:
# tr-micro; built by tr-wln-build.sh). PART=1: m1's tests, then eight interleaved one-stream
# rounds of n and m1 and one of bf16 and int8kv (about 6 minutes); PART=2: main's strict capacity
# at 2,560 streams and FAST_INT8_KV's at 10,000 (the latter needs more than an 80 GB card);
# PART=3 (an H200): five rounds of n and m1, then PART=2's capacities.
PACK=.gpu-carry/pack-h.tar.xz
if [ "${PART:-1}" = 1 ]; then
  PACK=$PACK WRITER=n TESTS="m1" ROUNDS="1 2 3 4 5 6 7 8" VARIANTS="n m1" FAST=1 PROBES= PROFILES= \
    bash "$(dirname "$0")/tr-wln-s61.sh"
else
  [ "$PART" = 3 ] && PACK=$PACK WRITER=n TESTS="" ROUNDS="1 2 3 4 5" VARIANTS="n m1" FAST=1 PROBES= PROFILES= \
    bash "$(dirname "$0")/tr-wln-s61.sh"
  WRITER=n WT=/tmp/wt-x BUILD=/tmp/build-x1
  . "$(dirname "$0")/device-setup.sh"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  timeout 150 .gpu-carry/n/mimi-bench-gpu --model $M --modes strict --threads 8 --at 2560 2>&1 | tail -15
  date -u +%T
  timeout 200 .gpu-carry/n/mimi-bench-gpu --model $M --modes int8kv --threads 8 --at 10000 2>&1 | tail -15
  date -u +%FT%TZ
fi
