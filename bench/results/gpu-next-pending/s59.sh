#!/bin/bash
# The gpu-next variants on a device (bench/results/gpu-next-pending.md); carry
# .gpu-carry/pack.tar.xz and this script.
#   bash s59.sh perf       one stream strict, interleaved rounds (ROUNDS, default "1 2 3") of c9
#                          (main's device code) and VARIANTS (default v2-v14); then the
#                          transformer's stage times of v2 and v9 (v2s and v9s: TR_STAMPS; not
#                          with STAMPS=0). Each run's seconds are printed: split the rounds over
#                          calls if 600 s is short
#   bash s59.sh probe      the graph step of v2 with ops or stages left out (MIMI_PROBE_SKIP);
#                          eager per-op profiles of c9, v2, v3, v7, v8 and v9
#   bash s59.sh test V...  test_gpu, test_golden on three clips and test_pocket of each variant
#                          named (v2, v3, v6, v7, v8, v9, v12 and v13 have test binaries in the pack)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
python3 -c "import tarfile; tarfile.open('.gpu-carry/pack.tar.xz').extractall('.gpu-carry')" || echo unpack failed
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/c9/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
# the variants' tests look for their models where they were built, and v9-v14's for their data
# in the worktree they were built from (tests/data is main's)
[ -e /tmp/wt-next ] || ln -s /work/main /tmp/wt-next
for d in /tmp/build-v2 /tmp/build-v3 /tmp/build-v6 /tmp/build-v7 /tmp/build-v8 /tmp/build-v9 /tmp/build-v12 /tmp/build-v13; do mkdir -p $d; ln -sfn /work/main/build-gpu/models $d/models; done
date -u +%FT%TZ
# a bench's one-stream run (strict), all its output; one: its one-stream line and its seconds
quick() { timeout 60 "$@" --model $M --modes strict --quick --max-streams 1 2>&1; }
one() { local t0=$SECONDS o; o=$(quick "$@" | grep -E "one stream, ms|rror" | paste -sd" "); echo "$o [$((SECONDS - t0)) s]"; }
if [ "$1" = perf ]; then
  for r in ${ROUNDS:-1 2 3}; do for v in ${VARIANTS:-c9 v2 v3 v4 v5 v6 v7 v8 v9 v10 v11 v12 v13 v14}; do echo "== $v $r $(one .gpu-carry/$v/mimi-bench-gpu)"; done; date -u +%T; done | tee /tmp/rounds.txt
  # a variant's encode / decode medians, round after round
  awk '/^== / && /encode median/ { for (i = 1; i <= NF; i++) { if ($i == "encode") e = $(i + 2); if ($i == "decode") d = $(i + 2) }
       m[$2] = m[$2] " " e "/" d; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
       END { for (k = 1; k <= n; k++) print "summary", order[k], m[order[k]] }' /tmp/rounds.txt
  [ "${STAMPS:-1}" = 0 ] || for v in v2s v9s; do quick .gpu-carry/$v/mimi-bench-gpu > $OUT/stamps-$v.txt; echo "stamps $v rc $?"; grep tr-stamps $OUT/stamps-$v.txt | tail -4; done
elif [ "$1" = probe ]; then
  for s in "" all ",transformer," ",enc.seanet,dec.seanet," ",conv,convtr_direct," ",enc.quantizer,dec.quantizer," ",tails," ",enc.downsample,dec.upsample,"; do
    echo "== skip '$s' $(MIMI_PROBE_SKIP="$s" one .gpu-carry/v2/mimi-bench-gpu)"
  done
  for v in c9 v2 v3 v7 v8 v9; do timeout 60 .gpu-carry/$v/mimi-bench-gpu --model $M --modes strict --profile 1 --ops > $OUT/prof-$v.txt 2>&1; echo "prof $v rc $?"; grep -E "steady" $OUT/prof-$v.txt | head -4; done
elif [ "$1" = test ]; then
  shift
  for V in "$@"; do
    timeout 200 .gpu-carry/$V/test_gpu > $OUT/test_gpu-$V.txt 2>&1; echo "$V test_gpu rc $?"; grep -E "FAIL|fail" $OUT/test_gpu-$V.txt | head; tail -1 $OUT/test_gpu-$V.txt
    for c in dev_speech_en dev_sweep_noise dev_long_en; do timeout 60 .gpu-carry/$V/test_golden $c native.safetensors all cuda > /tmp/golden.txt 2>&1; echo "$V golden $c rc $? $(tail -1 /tmp/golden.txt)"; cat /tmp/golden.txt >> $OUT/golden-$V.txt; done
    timeout 40 .gpu-carry/$V/test_pocket cuda > $OUT/pocket-$V.txt 2>&1; echo "$V pocket rc $? $(tail -1 $OUT/pocket-$V.txt)"
    date -u +%T
  done
fi
date -u +%FT%TZ
