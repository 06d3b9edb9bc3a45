#!/usr/bin/env bash
# CPU side of the attention run on the NVIDIA GPU machine (issue 38). Run here, from the repository root:
#   .state/attention-h200/cache.sqlite  triton_attention for sm_90, every spec of its table (68), built by
#       Triton 3.6.0 under Python 3.12 (the GPU machine's versions: a host's Triton must equal the
#       builder's), with no GPU; and the native attention family's sm_90 specs (120 since K/V staging; llvmlite + ptxas)
#   .whl/  the dependencies the GPU image lacks (bench/triton_h200_prepare.sh's list; run it once first
#       when .whl/ is empty)
# GPU side, one device call carrying .state/attention-h200 and .whl (the command is printed at the end).
set -eo pipefail
cd "$(dirname "$0")/.."
RA=(".venv/bin/python" -m rocke_aot.cli)
D=.state/attention-h200
mkdir -p "$D"
rm -f "$D"/cache.sqlite*
"${RA[@]}" build --arch sm_90 --lane llvm22 --family triton_attention --cache "$D/cache.sqlite" -j "$(nproc)" \
    --json > "$D/build-sm90.json"
# the native kernels (llvmlite's NVPTX + ptxas): every sm_90 spec of the attention family
"${RA[@]}" build --arch sm_90 --lane llvm22 --family attention --cache "$D/cache.sqlite" -j "$(nproc)" \
    --json > "$D/build-sm90-native.json"
"${RA[@]}" cache stats --cache "$D/cache.sqlite"
python3 -c "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('PRAGMA wal_checkpoint(TRUNCATE)'); c.close()" \
    "$D/cache.sqlite"
compgen -G ".whl/*.whl" >/dev/null || echo "no .whl/: run bash scripts/gpu-wheels.sh --tests for the wheels"
cat <<'CMD'
GPU side (one device call, carrying .state/attention-h200 and .whl):
  source scripts/gpu-site.sh && export PATH=$PATH:/usr/local/cuda/bin && \
  $PY -m rocke_aot.cli bench --run-from-cache --arch sm_90 --family triton_attention --lane llvm22 \
      --problems bench/problems/models/attention.json --cache .state/attention-h200/cache.sqlite \
      --candidates all --verify --out $OUT/bench-triton_attention.json > $OUT/bench.txt 2>&1; \
  $PY -m rocke_aot.cli bench --run-from-cache --arch sm_90 --family attention --lane llvm22 \
      --problems bench/problems/models/attention.json --cache .state/attention-h200/cache.sqlite \
      --candidates all --verify --out $OUT/bench-attention.json > $OUT/bench-native.txt 2>&1; \
  bash scripts/gpu-tests.sh -q -k attention > $OUT/gpu-tests.txt 2>&1; tail -5 $OUT/*.txt
CMD
