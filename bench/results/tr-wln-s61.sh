#!/bin/bash
# The tr-wln builds on a device (bench/results/gpu-h200-2026-12-05.md); carry PACK (default
# .gpu-carry/pack-l.tar.xz: w2, main's device code; a, b: the first tr-wln commits, built in
# /tmp/build-x1 from a worktree at /tmp/wt-x; bs, ms: b and main with TR_STAMPS, probes).
#   bash tr-wln-s61.sh   tests of TESTS (default "b a": the later ones only if the first's
#                        test_gpu fails, or all with ALL_TESTS=1), then
#                        ROUNDS (default "1 2 3"; set and empty: none) interleaved one-stream runs of VARIANTS (default
#                        "w2 a b", strict), one round of bf16 and int8kv, the stage times of
#                        PROBES (default "ms bs"), eager profiles of PROFILES (default "w2 b").
#                        First each build of SMOKE (default none) runs one stream with a 30 s
#                        limit; one that did not print its times without an error is listed in
#                        $OUT/smoke-failed and its tests are skipped (a kernel whose grid barrier
#                        never opens would hold each test to its limit).
PACK=${PACK:-.gpu-carry/pack-l.tar.xz} WRITER=${WRITER:-w2} WT=/tmp/wt-x BUILD=/tmp/build-x1
. "$(dirname "$0")/device-setup.sh"
for V in $SMOKE; do
  timeout 30 .gpu-carry/$V/mimi-bench-gpu --model $M --modes strict --quick --max-streams 1 > $OUT/smoke-$V.txt 2>&1
  src=$?; echo "$V smoke rc $src $(grep -E 'one stream, ms|rror' $OUT/smoke-$V.txt | head -3 | paste -sd' ')"
  { [ $src = 0 ] && grep -q "one stream, ms" $OUT/smoke-$V.txt && ! grep -q rror $OUT/smoke-$V.txt; } || echo $V >> $OUT/smoke-failed
done
set -- ${TESTS-b a}
first=$1
for V in "$@"; do
  [ -z "$ALL_TESTS" ] && [ $V != $first ] && [ "$first_rc" = 0 ] && continue
  grep -qx "$V" $OUT/smoke-failed 2>/dev/null && { echo "$V tests skipped (smoke)"; continue; }
  timeout 200 .gpu-carry/$V/test_gpu > $OUT/test_gpu-$V.txt 2>&1; rc=$?; [ $V = $first ] && first_rc=$rc
  echo "$V test_gpu rc $rc $(tail -1 $OUT/test_gpu-$V.txt)"; grep -A2 FAIL $OUT/test_gpu-$V.txt | head -20
  for c in dev_speech_en dev_sweep_noise dev_long_en; do timeout 60 .gpu-carry/$V/test_golden $c native.safetensors all cuda > /tmp/golden.txt 2>&1; echo "$V golden $c rc $? $(tail -1 /tmp/golden.txt)"; cat /tmp/golden.txt >> $OUT/golden-$V.txt; done
  timeout 40 .gpu-carry/$V/test_pocket cuda > /tmp/pocket.txt 2>&1; echo "$V pocket rc $? $(tail -1 /tmp/pocket.txt)"
  date -u +%T
done
quick() { timeout 60 .gpu-carry/$1/mimi-bench-gpu --model $M --modes $2 --quick --max-streams 1 2>&1; }
one() { quick $1 $2 | grep -E "one stream, ms|rror|==" | paste -sd" "; }
V=${VARIANTS:-w2 a b}
for r in ${ROUNDS-1 2 3}; do for v in $V; do echo "== $v $r $(one $v strict)"; done; date -u +%T; done
[ "${FAST:-1}" = 0 ] || for v in $V; do echo "== $v $(one $v bf16,int8kv)"; done
for v in ${PROBES-ms bs}; do quick $v strict > $OUT/stamps-$v.txt; echo "stamps $v rc $?"; grep -E "tr-stamps|ds-stamps" $OUT/stamps-$v.txt | tail -30; done
for v in ${PROFILES-w2 b}; do timeout 60 .gpu-carry/$v/mimi-bench-gpu --model $M --modes strict --profile 1 --ops > $OUT/prof-$v.txt 2>&1; echo "prof $v rc $?"; grep -E "transformer  " $OUT/prof-$v.txt | head -4; done
date -u +%FT%TZ
