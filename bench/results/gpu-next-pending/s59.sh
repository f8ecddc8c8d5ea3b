#!/bin/bash
# call 1 (perf; carry .gpu-carry/pack.tar.xz and .gpu-carry/s59.sh): one stream strict, three
# interleaved rounds of c9 (main's device code) and the gpu-next variants v2-v8
# (bench/results/gpu-next-pending.md); the graph step of v2 with ops or stages left out
# (MIMI_PROBE_SKIP); eager per-op profiles of c9, v2, v3, v7 and v8
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
python3 -c "import tarfile; tarfile.open('.gpu-carry/pack.tar.xz').extractall('.gpu-carry')" || echo unpack failed
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/c9/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
date -u +%FT%TZ
one() { timeout 60 "$@" --model $M --modes strict --quick --max-streams 1 2>&1 | grep -E "one stream, ms|rror" | paste -sd" " ; }
for r in 1 2 3; do for v in c9 v2 v3 v4 v5 v6 v7 v8; do echo "== $v $r $(one .gpu-carry/$v/mimi-bench-gpu)"; done; date -u +%T; done
pr() { MIMI_PROBE_SKIP="$1" timeout 60 .gpu-carry/v2/mimi-bench-gpu --model $M --modes strict --quick --max-streams 1 2>&1 | grep -E "one stream, ms|rror" | paste -sd" "; }
for s in "" all ",transformer," ",enc.seanet,dec.seanet," ",conv,convtr_direct," ",enc.quantizer,dec.quantizer," ",tails," ",enc.downsample,dec.upsample,"; do echo "== skip '$s' $(pr "$s")"; done
date -u +%FT%TZ
for v in c9 v2 v3 v7 v8; do timeout 60 .gpu-carry/$v/mimi-bench-gpu --model $M --modes strict --profile 1 --ops > $OUT/prof-$v.txt 2>&1; echo "prof $v rc $?"; grep -E "steady" $OUT/prof-$v.txt | head -4; done
date -u +%FT%TZ
