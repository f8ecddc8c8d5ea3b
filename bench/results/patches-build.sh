#!/bin/bash
# Builds the archive PACK for tr-wln-s61.sh from main and patches: PATCHES ("name:file ...",
# files under bench/results/patches, each applied alone on main; "name:a.diff+b.diff" applies
# several in order) become commits on a scratch worktree (/tmp/wt-patches), then
# tr-wln-build.sh builds `o` (main, the benchmark only unless TESTED names it) and each of them
# with its tests. Example (the stamps probe beside main, with main's tests):
#   PATCHES="ms:tr-stamps.diff" TESTED="o ms" \
#       PROBE_TARGETS=stage-floor-probe PACK=.gpu-carry/pack-n.tar.xz bash bench/results/patches-build.sh
set -e
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
WT=/tmp/wt-patches
[ -e $WT ] || { git worktree prune; git worktree add -q --detach $WT main; }
builds="o:$(git rev-parse main)" names=""
for np in $PATCHES; do
  n=${np%%:*}
  git -C $WT checkout -q --detach main
  for f in $(echo "${np#*:}" | tr + ' '); do git -C $WT apply "$PWD/bench/results/patches/$f"; done
  git -C $WT -c user.name=bench -c user.email=bench@localhost commit -qam "$n: ${np#*:} on main"
  builds="$builds $n:$(git -C $WT rev-parse HEAD)" names="$names $n"
done
BUILDS="$builds" TESTED="${TESTED-$names}" BENCH="${BENCH-o}" PACK="${PACK:-.gpu-carry/pack-n.tar.xz}" \
  bash bench/results/tr-wln-build.sh
# PROBE_TARGETS (e.g. "stage-floor-probe"): probes of main built too, into .gpu-carry/probes
# (carry that folder beside the archive; run them there as .gpu-carry/probes/<target>).
if [ -n "$PROBE_TARGETS" ]; then
  git -C /tmp/wt-x checkout -q --detach main
  make -C /tmp/build-x1 -j"$(nproc)" $PROBE_TARGETS > /tmp/build-probes.log 2>&1 || { echo "probes failed (/tmp/build-probes.log)"; exit 1; }
  mkdir -p .gpu-carry/probes
  for t in $PROBE_TARGETS; do cp "$(find /tmp/build-x1 -name $t -type f -perm -u+x | head -1)" .gpu-carry/probes/; done
  ls -la .gpu-carry/probes
fi
