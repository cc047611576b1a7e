"""Offscreen camera images of every env, rendered on the CPU (EGL / Mesa).

    cams = CameraRenderer(model, ("front",), size=64, depth=True)
    rgb, depth = cams.render(state, target, camera_shift, light_scale)
    # rgb {camera: uint8 [N, H, W, 3]}, depth {camera: float32 [N, H, W, 1] metres, <= MAX_DEPTH}

One GL context and one scratch `MjData` serve the whole batch: each env's physics
state is loaded, its kinematics computed, and the scene drawn, one env after the
other. The model's `vis.quality` has offsamples=0 and shadowsize=0 (see scene.py):
on Mesa's software renderer that is ~10x the frame rate of the defaults
(shared/ENVIRONMENT.md: 128x128 at 12-25 fps vs 230-290 fps).
"""

from __future__ import annotations

import copy
import os

import mujoco
import numpy as np

from sims.mujoco.physics import FULLPHYSICS

MAX_DEPTH = 3.0  # m: depth is clipped here; beyond the scene MuJoCo reports its far plane (~100 m)


def _check_gl_backend() -> None:
    """MuJoCo picks its GL backend from MUJOCO_GL when first imported; without a display only EGL/OSMesa work."""
    from mujoco.rendering.classic import gl_context

    chosen = getattr(gl_context, "_MUJOCO_GL", "")
    if chosen not in ("egl", "osmesa") and not os.environ.get("DISPLAY"):
        raise RuntimeError(
            f"mujoco was imported with MUJOCO_GL={chosen!r} and there is no display, so it cannot render offscreen; "
            "import sims.mujoco before anything imports mujoco, or export MUJOCO_GL=egl"
        )


class CameraRenderer:
    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], size: int, depth: bool = False):
        _check_gl_backend()
        self.model = copy.copy(model)  # a private copy: camera and light jitter is written into it per env
        self.cameras = cameras
        self.depth = depth
        self.data = mujoco.MjData(self.model)
        self.renderer = mujoco.Renderer(self.model, size, size)
        self.camera_ids = [self.model.camera(name).id for name in cameras]
        self.target_mocap = self.model.body("target").mocapid[0]
        self._cam_pos = self.model.cam_pos.copy()
        self._light_diffuse = self.model.light_diffuse.copy()

    def render(
        self, state: np.ndarray, target: np.ndarray, camera_shift: np.ndarray, light_scale: np.ndarray
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Images of N envs: state [N, nstate], target [N, 3], camera_shift [N, 3] m, light_scale [N]."""
        n, size = state.shape[0], self.renderer.height
        rgb = {c: np.empty((n, size, size, 3), np.uint8) for c in self.cameras}
        depth = {c: np.empty((n, size, size, 1), np.float32) for c in self.cameras} if self.depth else {}
        m, d = self.model, self.data
        for i in range(n):
            mujoco.mj_setState(m, d, state[i], FULLPHYSICS)
            d.mocap_pos[self.target_mocap] = target[i]
            m.cam_pos[:] = self._cam_pos + camera_shift[i]
            m.light_diffuse[:] = self._light_diffuse * light_scale[i]
            mujoco.mj_kinematics(m, d)
            mujoco.mj_camlight(m, d)
            for cam, cam_id in zip(self.cameras, self.camera_ids):
                self.renderer.update_scene(d, cam_id)
                rgb[cam][i] = self.renderer.render()
                if self.depth:
                    self.renderer.enable_depth_rendering()
                    depth[cam][i, ..., 0] = np.minimum(self.renderer.render(), MAX_DEPTH)
                    self.renderer.disable_depth_rendering()
        return rgb, depth

    def close(self) -> None:
        self.renderer.close()
