# Sourced by scripts/gpu-tests.sh and scripts/gpu-bench.sh: install the project (and any wheels
# in .whl/, pure installs, no network) into a fresh $SITE on a GPU machine that has python3 with
# llvmlite 0.50, numpy, torch and cuda-bindings, and put it and CUDA's ptxas on the paths.
# Sets PY and SITE; run from the repository root.
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
