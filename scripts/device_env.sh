# Source on a device machine (a bare image: CUDA torch in python3, no mujoco, zarr or hydra, no GL loaders), from the
# repository root with .whl (Python 3.12 wheels) and .gl (libglvnd / EGL .debs) carried, both made here by
# scripts/device_prepare.sh:  . scripts/device_env.sh
# Installs the wheels into /tmp/site when python3 lacks them, unpacks the GL loaders for MuJoCo's EGL rendering
# (without them every MuJoCo env fails on import: PyOpenGL finds no EGL platform), exports what both need.
if ! python3 -c "import mujoco, zarr, hydra" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || return 1
    export PYTHONPATH=/tmp/site:$PWD
fi
if [ -d .gl ] && nvidia-smi >/dev/null 2>&1; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    [ -f $egl ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
fi
export MUJOCO_GL=egl PYTHONUNBUFFERED=1
