# Sourced by a device script (bench/results/tr-wln-s61.sh) at the top of its checkout on the
# device: unpacks PACK (the carried archive of builds) into .gpu-carry, writes the synthetic model
# to $M with .gpu-carry/$WRITER/mimi-bench-gpu, and links the worktree path WT and the build
# directory BUILD that the builds' tests were built from (they read their data and models there).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
R=$(pwd); [ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
cd /work/main
python3 -c "import tarfile; tarfile.open('$PACK').extractall('.gpu-carry')" || echo unpack failed
mkdir -p build-gpu/models; M=/work/main/build-gpu/models/native.safetensors
.gpu-carry/$WRITER/mimi-bench-gpu --write-model $M > /dev/null 2>&1 || echo write-model failed
[ -e "$WT" ] || ln -s /work/main "$WT"
mkdir -p "$BUILD"; ln -sfn /work/main/build-gpu/models "$BUILD/models"
date -u +%FT%TZ
