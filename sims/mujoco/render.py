"""Offscreen camera images of every env, through EGL or OSMesa (Mesa's llvmpipe on the CPU, or a GPU's driver).

    cams = CameraRenderer(model, ("front",), size=64, depth=True, threads=2)
    rgb, depth = cams.render(state, target, camera_shift, light_scale)
    # rgb {camera: uint8 [N, H, W, 3]}, depth {camera: float32 [N, H, W, 1] metres, <= MAX_DEPTH}

A renderer (one GL context, a scratch `MjData`, a model copy) draws its envs one
after the other: each env's physics state is loaded, its kinematics computed and the
scene drawn. With `threads` > 1 the envs are split into that many contiguous groups,
each drawn by a renderer of its own in a thread of its own, so the frames are those
one renderer draws, bit for bit. That is for GL drawn in software (Mesa's llvmpipe, where
the threads are cores drawing); on a GPU's driver the renderer stays one, in one thread:
there two threads drew 2.0-3.5x slower than one (NVIDIA H200 through EGL,
benchmarks/RESULTS.md "Rendering in threads"). Each renderer is built, used and freed in its thread
only: a GL context is current in one thread, and a renderer freed from another thread
fails with EGL_BAD_ACCESS (after which another renderer of the process drew wrong
images, measured). The model's `vis.quality` has offsamples=0 and shadowsize=0 (see
scene.py): on Mesa's software renderer that is ~10x the frame rate of the defaults
(shared/ENVIRONMENT.md: 128x128 at 12-25 fps vs 230-290 fps).
"""

from __future__ import annotations

import copy
import os
import weakref
from concurrent.futures import ThreadPoolExecutor

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


SOFTWARE_RENDERERS = ("llvmpipe", "softpipe", "swr")  # Mesa's CPU rasterizers; "swr": swrast and OpenSWR


def software_gl(renderer: str) -> bool:
    """Whether a GL_RENDERER string names a rasterizer that runs on the CPU."""
    return any(name in renderer.lower() for name in SOFTWARE_RENDERERS)


class _Frames:
    """One GL context with its model copy (camera and light jitter is written into it per env) and scratch MjData."""

    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], size: int, depth: bool):
        from OpenGL import GL  # mujoco's EGL / OSMesa context goes through PyOpenGL too

        self.model = copy.copy(model)
        self.cameras, self.depth = cameras, depth
        self.data = mujoco.MjData(self.model)
        self.renderer = mujoco.Renderer(self.model, size, size)  # its context is now current in this thread
        self.gl_renderer = GL.glGetString(GL.GL_RENDERER).decode()  # "llvmpipe (LLVM ...)", "NVIDIA H200/PCIe/SSE2"
        self.camera_ids = [self.model.camera(name).id for name in cameras]
        self.target_mocap = self.model.body("target").mocapid[0]
        self._cam_pos = self.model.cam_pos.copy()
        self._light_diffuse = self.model.light_diffuse.copy()

    def draw(self, rows: range, rgb: dict, depth: dict, state, target, camera_shift, light_scale) -> None:
        """Draws envs `rows` into their rows of `rgb` and `depth`."""
        m, d = self.model, self.data
        for i in rows:
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

    def close(self) -> None:
        self.renderer.close()


class CameraRenderer:
    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], size: int, depth: bool = False,
                 threads: int = 1):
        _check_gl_backend()
        self.cameras, self.size, self.depth = cameras, size, depth
        # threads > 1: a thread per renderer for the renderer's life, where GL draws in software (module docstring)
        self.threads = [ThreadPoolExecutor(1) for _ in range(threads)] if threads > 1 else []
        build = lambda: _Frames(model, cameras, size, depth)  # noqa: E731
        first = self.threads[0].submit(build).result() if self.threads else build()
        if not software_gl(first.gl_renderer):  # a GPU: one context draws fastest
            for t in self.threads[1:]:
                t.shutdown()
            self.threads = self.threads[:1]
        self.frames = [first] + [t.submit(build).result() for t in self.threads[1:]]
        # also when this renderer is dropped unclosed: garbage collection runs in whichever thread drops it
        self._free = weakref.finalize(self, _free, self.threads, self.frames)
        self._free.atexit = False  # the threads have ended by then (concurrent.futures joins them first)

    def render(
        self, state: np.ndarray, target: np.ndarray, camera_shift: np.ndarray, light_scale: np.ndarray
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Images of N envs: state [N, nstate], target [N, 3], camera_shift [N, 3] m, light_scale [N]."""
        n, size = state.shape[0], self.size
        rgb = {c: np.empty((n, size, size, 3), np.uint8) for c in self.cameras}
        depth = {c: np.empty((n, size, size, 1), np.float32) for c in self.cameras} if self.depth else {}
        args = (rgb, depth, state, target, camera_shift, light_scale)
        if not self.threads:
            self.frames[0].draw(range(n), *args)
            return rgb, depth
        bounds = np.linspace(0, n, len(self.frames) + 1).astype(int)
        jobs = [t.submit(f.draw, range(lo, hi), *args)
                for t, f, lo, hi in zip(self.threads, self.frames, bounds[:-1], bounds[1:])]
        for job in jobs:
            job.result()
        return rgb, depth

    def close(self) -> None:
        self._free()


def _free(threads: list[ThreadPoolExecutor], frames: list[_Frames]) -> None:
    """Frees each renderer in its own thread (or this one, unthreaded), then ends the threads."""
    if not threads:
        frames[0].close()
    for t, f in zip(threads, frames):
        t.submit(f.close).result()
        t.shutdown()
