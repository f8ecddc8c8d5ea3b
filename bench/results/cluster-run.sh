#!/bin/bash
# One device call for the cluster builds (bench/results/rvq-cluster-pending.md): the probes, then
# each build of TESTS smoke-run (60 s limit) and its test_gpu, ROUNDS interleaved one-stream rounds
# of VARIANTS (strict), and an eager profile of each variant's transformer and quantizer chain.
# Carry PACK (tr-wln-build.sh's archive) and the probes' binaries in .gpu-carry.
PACK=${PACK:-.gpu-carry/pack-tc.tar.xz} WRITER=${WRITER:-o} WT=/tmp/wt-x BUILD=/tmp/build-x1
for p in ${PROBE_BINS-cluster_layer ring_walk cluster_floor}; do timeout 60 .gpu-carry/$p; done
[ -n "$PROBE_FORMS" ] && timeout 60 .gpu-carry/stage_floor forms
. "$(dirname "$0")/device-setup.sh"
quick() { timeout 60 .gpu-carry/$1/mimi-bench-gpu --model $M --modes $2 --quick --max-streams 1 2>&1; }
one() { quick $1 $2 | grep -E "one stream, ms|rror|==" | paste -sd" "; }
for V in ${TESTS-tb tc rc}; do
  s=$(one $V strict); echo "$V smoke: $s"
  echo "$s" | grep -q "one stream, ms" || { echo "$V: no timing, tests skipped"; continue; }
  timeout ${TEST_LIMIT:-150} .gpu-carry/$V/test_gpu > $OUT/test_gpu-$V.txt 2>&1; echo "$V test_gpu rc $? $(tail -1 $OUT/test_gpu-$V.txt)"
  grep -E "cluster form|FAIL" $OUT/test_gpu-$V.txt | head -12; date -u +%T
done
for r in ${ROUNDS-1 2}; do for v in ${VARIANTS-o rc tc tb}; do echo "== $v $r $(one $v strict)"; done; done
for v in ${PROFILES-o tb}; do timeout 60 .gpu-carry/$v/mimi-bench-gpu --model $M --modes strict --profile 1 --ops > $OUT/prof-$v.txt 2>&1; echo "prof $v:"; grep -E "steady state|transformer|rvq_chain" $OUT/prof-$v.txt | grep -v "^ *[0-9]* " | head -10; done
date -u +%FT%TZ
