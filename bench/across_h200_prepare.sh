#!/usr/bin/env bash
# CPU side of the selection-across-families bench on an NVIDIA H200 (bench/across_h200.py runs the GPU side).
# Run here, from the repository root, with no GPU; it leaves what the device call carries (ignored by git):
#   .state/across-h200/cache.sqlite  ONE cache: the sm_90 native gemm (path mma, f16 in and out: what
#       torch.matmul computes on f16) and every sm_90 triton_matmul config x M/N/K class, built by
#       Triton 3.6.0 (the llvm22 lane: the H200's Triton; a host's Triton must equal the builder's)
#   .whl/  the wheels the H200 lacks (bash scripts/gpu-wheels.sh --tests makes them; reused when present)
set -eo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
RA=("$PY" -m rocke_aot.cli)
D=.state/across-h200
J=${JOBS:-$(nproc)}
mkdir -p "$D"
rm -f "$D"/cache.sqlite*
# the Triton 3.6.0 lane environment (a no-op where it is registered already)
"${RA[@]}" toolchain install triton==3.6.0 --python python3.12 || echo "toolchain install failed: using the registered one"
"${RA[@]}" build --arch sm_90 --lane llvm22 --family triton_matmul --cache "$D/cache.sqlite" -j "$J" --json \
    > "$D/build-triton.json"
"${RA[@]}" build --arch sm_90 --lane llvm22 --family gemm --where path=mma --where in_dtype=f16 --where out_dtype=f16 \
    --cache "$D/cache.sqlite" -j "$J" --json > "$D/build-gemm.json"
"${RA[@]}" cache stats --cache "$D/cache.sqlite"
# the WAL folded into the file: the device call carries one file
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" \
    "$D/cache.sqlite"
# the selection step, here, before any GPU time is spent (bench/across_h200.py --no-run)
"$PY" bench/across_h200.py --cache "$D/cache.sqlite" --out "$D/cpu-check" --no-run
[ -d .whl ] && compgen -G ".whl/*.whl" >/dev/null || echo "no .whl/: run bash scripts/gpu-wheels.sh --tests"
du -sh "$D/cache.sqlite" .whl 2>/dev/null || true
