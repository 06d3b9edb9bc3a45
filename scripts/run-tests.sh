#!/usr/bin/env bash
# Set everything up, lint (ruff; the layer contracts run as a test), and run the test suite.
# The default run is CI's: every test but the `gpu` and `slow` marks (pyproject.toml addopts),
# with no skip, on a PATH that need hold no CUDA (the product finds setup's ptxas and cuobjdump
# beside the interpreter). Each mark has its run:
#   bash scripts/run-tests.sh            CI: not gpu, not slow
#   bash scripts/run-tests.sh --slow     the `slow` tests (whole-grid compiles and simulations; no GPU)
#   bash scripts/gpu-tests.sh            the `gpu` tests, on the GPU machine (docs/gpu.md)
# The tests run on every core (pytest-xdist, work stealing: the long reliability tests do not
# hold the rest back); ROCKE_AOT_TEST_WORKERS=0 runs them in one process. Other arguments go to
# pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
MARK=()
if [ "${1:-}" = --slow ]; then
  shift
  MARK=(-m slow)
fi
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${ROCKE_AOT_TEST_WORKERS:-auto}" --dist worksteal \
  "${MARK[@]}" "$@"
