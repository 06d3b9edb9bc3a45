#!/usr/bin/env bash
# Run the `gpu`-marked tests on a machine with an NVIDIA GPU (sm_90), e.g. an H200.
# That machine needs python3 with llvmlite 0.50, numpy, torch and cuda-bindings, and
# CUDA's ptxas. Packages it lacks can be given as wheels in .whl/ (pure installs, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${ROCKE_AOT_GPU_SITE:-/tmp/rocke-site}
PY=${PYTHON:-python3}
rm -rf "$SITE"; mkdir -p "$SITE"
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl
fi
# The project itself, without dependencies (they are on the machine or in .whl/).
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" .
export PYTHONPATH="$SITE"
command -v ptxas >/dev/null || export PATH="$PATH:/usr/local/cuda/bin"
"$PY" - <<'PY'
import llvmlite, numpy, torch
print("llvmlite", llvmlite.__version__, "numpy", numpy.__version__, "torch", torch.__version__,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
PY
# Run from a copy of tests/ so the repository folders do not shadow the installed package.
rm -rf /tmp/rocke-gpu-tests && cp -r tests /tmp/rocke-gpu-tests && cp pyproject.toml /tmp/rocke-gpu-tests/
cd /tmp/rocke-gpu-tests
exec "$PY" -m pytest -p no:cacheprovider -m gpu -rA "$@" ./*_gpu.py
