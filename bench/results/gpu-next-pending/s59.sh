#!/bin/bash
# call 1 (perf; carry .gpu-carry/{c9,v2,v3,v4,v5,v6}/mimi-bench-gpu and this script): c9 (main's
# device code, 535f512 less its SASS-neutral change) vs v2 (gpu-next cba01d1: host-divided column
# counts, p / K by multiply-high, u = p >= c_in, parts' sums 8 a channel at a time) vs v3 (de97277,
# -DDIRECT_WARPS=16) vs v4 (v3 + DIRECT_CONV_BLOCKS=264) vs v5 (v3 + DIRECT_CONV_BLOCKS=132,
# DIRECT_CONV_CHUNK=512) vs v6 (gpu-next's GPU_DIRECT_CHANNELS=16, DIRECT_MIN_BLOCKS=3,
# DIRECT_CONV_BLOCKS=396); (v1, not carried: v2 with DIRECT_PART_LOADS 4)
# graph attribution by leaving ops out (v2, MIMI_PROBE_SKIP); eager per-op profiles
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/c9/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
date -u +%FT%TZ
one() { timeout 60 "$@" --model $M --modes strict --quick --max-streams 1 2>&1 | grep -E "one stream, ms|rror" | paste -sd" " ; }
for r in 1 2 3; do for v in c9 v2 v3 v4 v5 v6; do echo "== $v $r $(one .gpu-carry/$v/mimi-bench-gpu)"; done; done
date -u +%FT%TZ
pr() { MIMI_PROBE_SKIP="$1" timeout 60 .gpu-carry/v2/mimi-bench-gpu --model $M --modes strict --quick --max-streams 1 2>&1 | grep -E "one stream, ms|rror" | paste -sd" "; }
for s in "" all ",transformer," ",enc.seanet,dec.seanet," ",conv,convtr_direct," ",enc.quantizer,dec.quantizer," ",tails," ",enc.downsample,dec.upsample,"; do echo "== skip '$s' $(pr "$s")"; done
date -u +%FT%TZ
for v in c9 v2 v3; do timeout 60 .gpu-carry/$v/mimi-bench-gpu --model $M --modes strict --profile 1 --ops > $OUT/prof-$v.txt 2>&1; echo "prof $v rc $?"; grep -E "steady" $OUT/prof-$v.txt | head -4; done
date -u +%FT%TZ
