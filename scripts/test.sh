#!/usr/bin/env bash
# Set up and run the default test suite (CPU, under 5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
