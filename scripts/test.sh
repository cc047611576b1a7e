#!/usr/bin/env bash
# Set up and run the default test suite (CPU, ~5 minutes on 2 cores): two worker processes, a test file each at a
# time (pytest-xdist's loadfile keeps a file's module fixtures in one worker). `bash scripts/test.sh -n 0` runs it in
# one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
