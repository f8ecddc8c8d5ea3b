#!/bin/bash
# The run of bench/results/h200-main-pending.md, carrying PACK (default .gpu-carry/pack-h3.tar.xz:
# n, main's device code before the transformer's last changes, e27391d; k, main with them;
# built by tr-wln-build.sh). PART=1: TESTS' tests (default k), then ROUNDS (default eight)
# interleaved one-stream rounds of VARIANTS (default "n k") and one of bf16 and int8kv (about 6
# minutes); PART=2: CAP's (default k) strict capacity at 2,560 streams and FAST_INT8_KV's at
# 10,000 (the latter needs more than an 80 GB card); PART=3 (an H200): four rounds, then PART=2.
# WRITER (default n) is the build whose benchmark writes the synthetic model; INT8_CAP=0 leaves
# out FAST_INT8_KV's capacity (about 3 minutes).
PACK=${PACK:-.gpu-carry/pack-h3.tar.xz} VARIANTS=${VARIANTS:-n k} CAP=${CAP:-k} WRITER=${WRITER:-n}
run_rounds() {
  PACK=$PACK WRITER=$WRITER TESTS="${TESTS-k}" ROUNDS="$1" VARIANTS="$VARIANTS" FAST=1 PROBES= PROFILES= \
    bash "$(dirname "$0")/tr-wln-s61.sh"
}
if [ "${PART:-1}" = 1 ]; then
  run_rounds "1 2 3 4 5 6 7 8"
else
  [ "$PART" = 3 ] && run_rounds "1 2 3 4"
  WT=/tmp/wt-x BUILD=/tmp/build-x1
  . "$(dirname "$0")/device-setup.sh"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  timeout 150 .gpu-carry/$CAP/mimi-bench-gpu --model $M --modes strict --threads 8 --at 2560 2>&1 | tail -15
  date -u +%T
  [ "${INT8_CAP:-1}" = 0 ] ||
    timeout 200 .gpu-carry/$CAP/mimi-bench-gpu --model $M --modes int8kv --threads 8 --at 10000 2>&1 | tail -15
  date -u +%FT%TZ
fi
