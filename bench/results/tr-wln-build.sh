#!/bin/bash
# Rebuilds .gpu-carry/pack-l3.tar.xz for tr-wln-s61.sh (bench/results/tr-wln-pending.md) on the
# development host: each build's branch checked out in a worktree at /tmp/wt-x and built in
# /tmp/build-x1 (the paths its tests look for their data and models under), one after another
# (those with main's ops.h first, so that it changes once).
# w2 is main's device code (bab2fc9; d13f9c1's kernels are the same).
set -e
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
[ -e /tmp/wt-x ] || git worktree add --detach /tmp/wt-x d13f9c1
[ -e /tmp/build-x1/CMakeCache.txt ] || cmake -B /tmp/build-x1 -S /tmp/wt-x -DCMAKE_BUILD_TYPE=Release -DMIMI_WERROR=ON
for vc in w2:bab2fc9 c:tr-wln cs:probe-cs e:tr-ff d:tr-att2 d2:tr-att2-pf cd:tr-cd cds:probe-cds cde:tr-cde; do
  v=${vc%%:*}; c=${vc#*:}
  git -C /tmp/wt-x checkout -q --detach "$c"
  case $v in w2|cs|cds) t="mimi-bench-gpu" ;; *) t="mimi-bench-gpu test_gpu test_golden test_pocket" ;; esac
  make -C /tmp/build-x1 -j"$(nproc)" $t > /tmp/build-$v.log 2>&1 || { echo "build $v failed (/tmp/build-$v.log)"; exit 1; }
  mkdir -p .gpu-carry/$v
  for f in $t; do cp "$(find /tmp/build-x1 -name $f -type f -perm -u+x | head -1)" .gpu-carry/$v/; done
  echo "built $v ($c)"
done
python3 - <<'PY'
import tarfile
with tarfile.open('.gpu-carry/pack-l3.tar.xz', 'w:xz') as t:
    for v in ['c', 'd', 'd2', 'cd', 'e', 'cde']:
        for f in ['mimi-bench-gpu', 'test_gpu', 'test_golden', 'test_pocket']: t.add(f'.gpu-carry/{v}/{f}', f'{v}/{f}')
    for v in ['w2', 'cs', 'cds']: t.add(f'.gpu-carry/{v}/mimi-bench-gpu', f'{v}/mimi-bench-gpu')
PY
ls -la .gpu-carry/pack-l3.tar.xz
