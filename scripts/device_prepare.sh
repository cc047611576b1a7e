#!/usr/bin/env bash
# What a device machine needs carried, made here (nvidia-h100-x1 / nvidia-h200: python3 is Python 3.12 with CUDA
# torch, numpy, pyyaml, cloudpickle, rich, but no mujoco, zarr, hydra or tensordict, and no GL loader libraries):
#   bash scripts/device_prepare.sh
# -> .whl/  Python 3.12 wheels of those packages (and what they need that the image lacks), at the versions .venv
#           holds, so that the device runs what the tests here ran (~36 MB)
# -> .gl/   Debian's libglvnd loaders (libEGL and friends, ~0.3 MB): without them every MuJoCo env fails on import
#           there (PyOpenGL finds no EGL platform); NVIDIA's EGL vendor library comes with the driver
# Then a device call carries [".whl", ".gl"] (and .venv is not carried) and sources scripts/device_env.sh first, as
# scripts/gpu_check.sh and benchmarks/vla_pixels_gpu_job.sh do. Checked here with Python 3.12 (pyenv): the wheels
# install with --no-deps beside numpy and import, and MuJoCo renders through EGL (2026-11-27).
set -euo pipefail
cd "$(dirname "$0")/.."
# the image's list: /work/.library/device/KINDS.md ("Python packages already there")
PACKAGES="mujoco mujoco-core mujoco-studio websockets glfw PyOpenGL zarr numcodecs donfig google-crc32c hydra-core
          omegaconf antlr4-python3-runtime tensordict pyvers gymnasium farama-notifications"
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
rm -rf .whl .gl
mkdir -p .whl .gl
for p in $PACKAGES; do
    v=$(.venv/bin/python -m pip show "$p" | sed -n 's/^Version: //p')
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d .whl "$p==$v" 2>/dev/null \
        || python3 -m pip wheel -q --no-deps -w .whl "$p==$v"  # a pure-Python sdist (antlr4 4.9.3): its wheel
done
if ls .whl | grep -v -E "cp312|py3-none|py2.py3-none"; then echo "device_prepare: not for Python 3.12 (above)"; exit 1; fi
apt-get update -qq >/dev/null
(cd .gl && apt-get download -q libglvnd0 libegl1 libopengl0 libgl1 libglx0 libgles2 2>/dev/null)
echo "device_prepare: $(ls .whl | wc -l) wheels in .whl ($(du -sh .whl | cut -f1)), $(ls .gl | wc -l) debs in .gl"
