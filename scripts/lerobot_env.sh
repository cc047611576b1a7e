#!/usr/bin/env bash
# Builds (once) a separate Python 3.12 environment with LeRobot for the LeRobot compatibility tests
# (datasets; arms and leader arms on LeRobot's real classes: our package runs there from PYTHONPATH,
# needing only the torch and numpy LeRobot brings) and the data benchmark. LeRobot cannot share .venv:
# its dataset code imports torchvision, which fails beside the CPU torch==2.13.0 there, and 0.5+ needs
# Python 3.12 (../shared/ENVIRONMENT.md).
#   bash scripts/lerobot_env.sh            # -> .lerobot-env/bin/python (or $LEROBOT_ENV)
# ~3.5 min and ~5.4 GB (a CUDA torch from PyPI comes with it). numpy < 2.3: LeRobot's scalar
# features break on numpy 2.4 (measured, ENVIRONMENT.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_DIR=${LEROBOT_ENV:-.lerobot-env}
VERSION=0.6.1
stamp="$ENV_DIR/.installed-lerobot-$VERSION-vla"
# hypothesis: the property-based test on LeRobot's real classes (tests/real_robot/lerobot_arms_side.py); its own
# stamp, so that an environment built without it is topped up (seconds) rather than rebuilt
add_hypothesis() {
  [ -f "$ENV_DIR/.installed-hypothesis" ] && return 0
  "$ENV_DIR/bin/python" -m pip install -q "hypothesis>=6.100"
  touch "$ENV_DIR/.installed-hypothesis"
}
if [ -f "$stamp" ]; then add_hypothesis; exit 0; fi
is_312() { [ -n "$1" ] && "$1" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; }
PY=""
# a pyenv shim on PATH may exist without the version being selected, so each candidate is tried
for candidate in "${PYTHON312:-}" "$(command -v python3.12 || true)" \
    $(ls -d "$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"/versions/3.12*/bin/python3.12 2>/dev/null); do
  if is_312 "$candidate"; then PY=$candidate; break; fi
done
if [ -z "$PY" ]; then
  echo "scripts/lerobot_env.sh: LeRobot $VERSION needs Python 3.12; set PYTHON312=/path/to/python3.12" >&2
  exit 2
fi
rm -rf "$ENV_DIR"
"$PY" -m venv "$ENV_DIR"
"$ENV_DIR/bin/python" -m pip install -q --upgrade pip
# smolvla, pi: LeRobot's VLA classes (policies/vla/lerobot_policy.py; transformers comes with them); tensordict:
# our Policy contract's batches, for the wrapper's tests (tests/policies/lerobot_vla_side.py)
"$ENV_DIR/bin/python" -m pip install -q "lerobot[dataset,smolvla,pi]==$VERSION" "numpy<2.3" "tensordict>=0.15,<0.16"
"$ENV_DIR/bin/python" -c "import lerobot, lerobot.datasets.lerobot_dataset; print('lerobot', lerobot.__version__)"
touch "$stamp"
add_hypothesis
