#!/bin/bash
# Builds the archive PACK (default .gpu-carry/pack-l4.tar.xz) for tr-wln-s61.sh
# (bench/results/tr-wln-pending.md) on the development host: each build's commit checked out in a
# worktree at /tmp/wt-x and built in /tmp/build-x1 (the paths its tests look for their data and
# models under), one after another. A build whose .gpu-carry/<name>/commit names its commit is
# kept as it is. w2 is main's device code before the candidates (bab2fc9).
set -e
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
PACK=${PACK:-.gpu-carry/pack-l4.tar.xz}
# BUILDS (name:commit), TESTED (built with the tests; the others with the benchmark only) and
# BENCH (the benchmark-only builds the archive takes) default to the tr-wln run's.
TESTED=${TESTED-"c d d2 cd e cde z p zp nc na k kp nak l"}
BENCH=${BENCH-"w2 cs cds ds"}
[ -e /tmp/wt-x ] || { git worktree prune; git worktree add --detach /tmp/wt-x d13f9c1; }
[ -e /tmp/build-x1/CMakeCache.txt ] || cmake -B /tmp/build-x1 -S /tmp/wt-x -DCMAKE_BUILD_TYPE=Release -DMIMI_WERROR=ON
BUILDS=${BUILDS-"w2:bab2fc9 c:tr-wln cs:probe-cs e:tr-ff d:tr-att2 d2:tr-att2-pf cd:tr-cd cds:probe-cds cde:tr-cde
        z:step-mapped p:direct-ep zp:step-ep nc:next-cde na:next-all ds:probe-ds
        k:seanet-chain kp:chain-ep nak:next-all-k l:l2-prefetch"}
for vc in $BUILDS; do
  v=${vc%%:*}; c=$(git rev-parse "${vc#*:}")
  if [ "$(cat .gpu-carry/$v/commit 2>/dev/null)" = "$c" ]; then echo "kept $v ($c)"; continue; fi
  git -C /tmp/wt-x checkout -q --detach "$c"
  case " $TESTED " in *" $v "*) t="mimi-bench-gpu test_gpu test_golden test_pocket" ;; *) t="mimi-bench-gpu" ;; esac
  make -C /tmp/build-x1 -j"$(nproc)" $t > /tmp/build-$v.log 2>&1 || { echo "build $v failed (/tmp/build-$v.log)"; exit 1; }
  rm -rf .gpu-carry/$v && mkdir -p .gpu-carry/$v
  for f in $t; do cp "$(find /tmp/build-x1 -name $f -type f -perm -u+x | head -1)" .gpu-carry/$v/; done
  echo "$c" > .gpu-carry/$v/commit
  echo "built $v ($c)"
done
TESTED="$TESTED" BENCH="$BENCH" PACK="$PACK" python3 - <<'PY'
import os, tarfile
tested = os.environ['TESTED'].split()
with tarfile.open(os.environ['PACK'], 'w:xz') as t:
    for v in tested:
        for f in ['mimi-bench-gpu', 'test_gpu', 'test_golden', 'test_pocket']: t.add(f'.gpu-carry/{v}/{f}', f'{v}/{f}')
    for v in os.environ['BENCH'].split(): t.add(f'.gpu-carry/{v}/mimi-bench-gpu', f'{v}/mimi-bench-gpu')
PY
ls -la "$PACK"
