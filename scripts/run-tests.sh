#!/usr/bin/env bash
# Set everything up and run the test suite (GPU tests are deselected by marker; see docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
