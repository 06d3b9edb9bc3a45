#!/usr/bin/env bash
# Set everything up, lint (ruff; the layer contracts run as a test), and run the test suite
# (GPU tests are deselected by marker; see docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
