#!/usr/bin/env bash
# Run the `gpu`-marked tests on a machine with an NVIDIA GPU (sm_90), e.g. an H200.
# That machine needs python3 with llvmlite 0.50, numpy, torch and cuda-bindings, and
# CUDA's ptxas. Packages it lacks can be given as wheels in .whl/ (pure installs, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-site.sh
"$PY" - <<'PY'
import llvmlite, numpy, torch
print("llvmlite", llvmlite.__version__, "numpy", numpy.__version__, "torch", torch.__version__,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
PY
# Run from a copy of tests/ so the repository folders do not shadow the installed package.
rm -rf /tmp/rocke-gpu-tests && cp -r tests /tmp/rocke-gpu-tests && cp pyproject.toml /tmp/rocke-gpu-tests/
cd /tmp/rocke-gpu-tests
exec "$PY" -m pytest -p no:cacheprovider -m gpu -rA "$@" ./*_gpu.py ./test_cubin_resources.py
