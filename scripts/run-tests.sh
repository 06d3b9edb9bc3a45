#!/usr/bin/env bash
# Set everything up, lint (ruff; the layer contracts run as a test), and run the test suite
# (GPU tests are deselected by marker; see docs/gpu.md). The tests run on every core
# (pytest-xdist, work stealing: the long reliability tests do not hold the rest back);
# ROCKE_AOT_TEST_WORKERS=0 runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n "${ROCKE_AOT_TEST_WORKERS:-auto}" --dist worksteal "$@"
