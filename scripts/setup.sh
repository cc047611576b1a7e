#!/usr/bin/env bash
# Set up .venv with the framework and its dev tools. Idempotent: re-running is fast.
#   bash scripts/setup.sh            core + dev extras
#   EXTRAS=dev,mujoco bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
EXTRAS=${EXTRAS:-dev}
stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)-${EXTRAS//,/_}
if [ -f "$stamp" ]; then exit 0; fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first, from the pin, so nothing below can swap it for a CUDA build
.venv/bin/python -m pip install -q -c constraints.txt torch==2.13.0
.venv/bin/python -m pip install -q -c constraints.txt -e ".[${EXTRAS}]"
rm -f .venv/.installed-*
touch "$stamp"
echo "set up .venv (extras: ${EXTRAS})"
