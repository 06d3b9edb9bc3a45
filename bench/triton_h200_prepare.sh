#!/usr/bin/env bash
# CPU side of the Triton qualification on an NVIDIA H200 (bench/triton_h200.py runs the GPU side).
# Run here, from the repository root; it leaves what the device call carries (both ignored by git):
#   .state/triton-h200/cache.sqlite  the Triton families built by Triton 3.6.0 (the H200's version)
#       under Python 3.12 (the H200's), with no GPU: sm_90 (every matmul config x M/N/K class, every
#       softmax block x cols class) and gfx942 / gfx950 (matmul, dims divisible by 16; gfx1250 refused
#       there: Triton 3.6 has no WMMA), plus the same matmul by Triton 3.9 (llvm24) for gfx942/950/1250
#   .whl/   the project's dependencies the H200 image lacks, as cp312 wheels (docs/bench.md's list,
#       pinned to this venv's versions, plus cryptography and its cffi for the client's trust layer)
set -eo pipefail
cd "$(dirname "$0")/.."
RA=(".venv/bin/python" -m rocke_aot.cli)
[ -x .venv/bin/python ] || RA=(python3 -m rocke_aot.cli)
D=.state/triton-h200
mkdir -p "$D"
rm -f "$D"/cache.sqlite*
"${RA[@]}" toolchain install triton==3.6.0 --python python3.12
"${RA[@]}" build --arch sm_90 --lane llvm22 --family triton_matmul --family triton_softmax --cache "$D/cache.sqlite" \
    -j "$(nproc)" --json > "$D/build-sm90.json"
# AMD: the same matmul, dims divisible by 16; gfx1250 from Triton 3.9 (llvm24): Triton 3.6 has no WMMA there
"${RA[@]}" build --arch gfx942 --arch gfx950 --arch gfx1250 --lane llvm22 --lane llvm24 --family triton_matmul \
    --where m_class=div16 --where n_class=div16 --where k_class=div16 --cache "$D/cache.sqlite" -j "$(nproc)" \
    --json > "$D/build-amd.json"
"${RA[0]}" bench/triton_amd_isa.py --cache "$D/cache.sqlite" | tee "$D/amd-isa.txt"
"${RA[@]}" cache stats --cache "$D/cache.sqlite"
# a checkpoint of the WAL into the file itself: the device call carries one file
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" \
    "$D/cache.sqlite"
bash scripts/gpu-wheels.sh --tests  # the GPU host's missing wheels into .whl/ (one list: scripts/gpu-wheels.sh)
du -sh "$D/cache.sqlite" .whl
