"""Offscreen camera images of every env, through EGL or OSMesa (Mesa's llvmpipe on the CPU, or a GPU's driver).

    cams = CameraRenderer(model, ("front",), size=64, depth=True, threads=2)
    rgb, depth = cams.render(state, target, camera_shift, light_scale)
    # rgb {camera: uint8 [N, H, W, 3]}, depth {camera: float32 [N, H, W, 1] metres, <= MAX_DEPTH}

A renderer (one GL context, a scratch `MjData`, a model copy) draws its envs one
after the other: each env's physics state is loaded, its kinematics computed and the
scene drawn into the env's own tile of one offscreen buffer, which is read back once
a call (a read per frame was most of a GPU's collection time). With `threads` > 1 the envs are split into that many contiguous groups,
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
import math
import os
import weakref
from concurrent.futures import ThreadPoolExecutor

import mujoco
import numpy as np

from sims.mujoco.physics import FULLPHYSICS

MAX_DEPTH = 3.0  # m: depth is clipped here; beyond the scene MuJoCo reports its far plane (~100 m)
# px, the side of a renderer's offscreen buffer at most (its tiles: 42 x 42 frames of 48 px): OpenGL 3 guarantees
# renderbuffers of 1024 px at least (GL_MAX_RENDERBUFFER_SIZE); llvmpipe and NVIDIA's drivers allow 16384 and more
MAX_BUFFER = 2048


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
    """One GL context with its model copy (camera and light jitter is written into it per env) and scratch MjData.
    Its frames are tiles of one offscreen buffer: each env's cameras are drawn into viewports side by side, and the
    buffer is read back once per `draw` (or whenever it is full) instead of once a frame. A read is a GPU -> host
    synchronisation: on an NVIDIA H200, with three training processes, one `mjr_readPixels` a frame was ~80% of
    collecting a rollout (benchmarks/RESULTS.md, "Tiled frames"). The viewport and the projection of a tile are
    those of a buffer of its own, but where it sits moves the rasterizer's rounding (see `draw`); the test checks the
    tiles against mujoco.Renderer's frames within it."""

    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], size: int, depth: bool, envs: int):
        from mujoco.rendering.classic import gl_context
        from OpenGL import GL  # mujoco's EGL / OSMesa context goes through PyOpenGL too

        self.model = copy.copy(model)
        self.cameras, self.size, self.depth = cameras, size, depth
        tiles = envs * len(cameras) * (2 if depth else 1)  # depth is a pass of its own (below)
        self.grid = max(1, min(math.ceil(math.sqrt(tiles)), MAX_BUFFER // size))  # tiles per side of the buffer
        side = self.grid * size
        vis = self.model.vis.global_
        vis.offwidth, vis.offheight = max(vis.offwidth, side), max(vis.offheight, side)

        class Context(gl_context.GLContext):  # freed by close(), in its own thread, never by garbage collection
            def __del__(self):
                pass

        self.context = Context(vis.offwidth, vis.offheight)
        self.context.make_current()
        self.gl_renderer = GL.glGetString(GL.GL_RENDERER).decode()  # "llvmpipe (LLVM ...)", "NVIDIA H200/PCIe/SSE2"
        self.mjr = mujoco.MjrContext(self.model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self.mjr)
        self.mjr.readDepthMap = mujoco.mjtDepthMap.mjDEPTH_ZEROFAR  # as mujoco.Renderer
        self.scene, self.option = mujoco.MjvScene(self.model, maxgeom=10000), mujoco.MjvOption()
        self.views = []
        for name in cameras:
            view = mujoco.MjvCamera()
            view.type, view.fixedcamid = mujoco.mjtCamera.mjCAMERA_FIXED, self.model.camera(name).id
            self.views.append(view)
        self.data = mujoco.MjData(self.model)
        self.target_mocap = self.model.body("target").mocapid[0]
        self._cam_pos = self.model.cam_pos.copy()
        self._light_diffuse = self.model.light_diffuse.copy()
        extent = self.model.stat.extent  # the clip planes, float32 as glFrustum has them (mujoco.Renderer)
        self._near = np.float32(self.model.vis.map.znear * extent)
        self._far = np.float32(self.model.vis.map.zfar * extent)

    def draw(self, envs, rows, rgb: dict, depth: dict, state, target, camera_shift, light_scale) -> None:
        """Draws envs `envs` (their indices in the env) into `rows` of `rgb` and `depth`. A frame's tile is fixed by
        its env index, camera and pass, so an env's frames are the same bit for bit whichever renderer draws it and
        with whichever other envs. (A frame's position in the buffer moves its pixels by the rasterizer's rounding:
        against mujoco.Renderer's own buffer, one level in 0.2% of one frame's rgb values in 16, and up to ~1.3e-5 m
        of depth.)"""
        m, d, scene = self.model, self.data, self.scene
        passes = 2 if self.depth else 1
        segment, idcolor = mujoco.mjtRndFlag.mjRND_SEGMENT, mujoco.mjtRndFlag.mjRND_IDCOLOR
        page = None
        self.context.make_current()  # another renderer of this thread (an eval env's) may have been current
        pending = []  # (tile, row, camera, depth pass) drawn on this page and not yet read
        for e, r in zip(envs, rows):
            mujoco.mj_setState(m, d, state[r], FULLPHYSICS)
            d.mocap_pos[self.target_mocap] = target[r]
            m.cam_pos[:] = self._cam_pos + camera_shift[r]
            m.light_diffuse[:] = self._light_diffuse * light_scale[r]
            mujoco.mj_kinematics(m, d)
            mujoco.mj_camlight(m, d)
            for c, (cam, view) in enumerate(zip(self.cameras, self.views)):
                mujoco.mjv_updateScene(m, d, self.option, None, view, mujoco.mjtCatBit.mjCAT_ALL.value, scene)
                for depth_pass in (False, True) if self.depth else (False,):
                    # mujoco.Renderer draws depth with geoms coloured by id: "more accurate at far distances"
                    scene.flags[segment] = scene.flags[idcolor] = depth_pass
                    now, tile = divmod((e * len(self.cameras) + c) * passes + depth_pass, self.grid ** 2)
                    if now != page and pending:
                        self._read(pending, rgb, depth)
                        pending = []
                    page = now
                    y, x = divmod(tile, self.grid)
                    viewport = mujoco.MjrRect(x * self.size, y * self.size, self.size, self.size)
                    mujoco.mjr_render(viewport, scene, self.mjr)
                    pending.append((tile, r, cam, depth_pass))
        scene.flags[segment] = scene.flags[idcolor] = False
        if pending:
            self._read(pending, rgb, depth)

    def _read(self, tiles: list, rgb: dict, depth: dict) -> None:
        """One read of the buffer's rows of tiles that hold `tiles`, each into its row and camera (flipped: GL's rows
        run bottom up)."""
        size, grid = self.size, self.grid
        low, high = tiles[0][0] // grid, tiles[-1][0] // grid + 1  # tiles come in ascending order
        colour = np.empty(((high - low) * size, grid * size, 3), np.uint8)
        z = np.empty(colour.shape[:2], np.float32) if self.depth else None
        mujoco.mjr_readPixels(colour, z, mujoco.MjrRect(0, low * size, grid * size, (high - low) * size), self.mjr)
        for tile, r, cam, depth_pass in tiles:
            y, x = divmod(tile, grid)
            at = (slice((y - low) * size, (y - low + 1) * size), slice(x * size, (x + 1) * size))
            if depth_pass:
                depth[cam][r, ..., 0] = np.minimum(self._metres(z[at][::-1]), MAX_DEPTH)
            else:
                rgb[cam][r] = colour[at][::-1]

    def _metres(self, z: np.ndarray) -> np.ndarray:
        """Reverse-Z depth buffer values -> metres along the view axis, as mujoco.Renderer computes them for a
        perspective camera (float32 coefficients, float64 arithmetic, float32 result)."""
        near, far = self._near, self._far
        c = np.float32(-0.5) * (-(far + near) / (far - near)) - np.float32(0.5)
        dz = np.float32(-0.5) * (-(np.float32(2) * far * near) / (far - near))
        return (dz / (z.astype(np.float64) + c)).astype(np.float32)

    def close(self) -> None:
        self.context.make_current()
        self.mjr.free()
        self.context.free()


class CameraRenderer:
    def __init__(self, model: mujoco.MjModel, cameras: tuple[str, ...], size: int, depth: bool = False,
                 threads: int = 1, envs: int = 1):
        """`envs`: how many envs a render call draws (at most), to size each renderer's buffer of tiles."""
        _check_gl_backend()
        self.cameras, self.size, self.depth = cameras, size, depth
        # threads > 1: a thread per renderer for the renderer's life, where GL draws in software (module docstring)
        self.threads = [ThreadPoolExecutor(1) for _ in range(threads)] if threads > 1 else []
        build = lambda: _Frames(model, cameras, size, depth, envs)  # noqa: E731
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
        self, state: np.ndarray, target: np.ndarray, camera_shift: np.ndarray, light_scale: np.ndarray,
        envs: np.ndarray | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Images of N envs: state [N, nstate], target [N, 3], camera_shift [N, 3] m, light_scale [N]; `envs` [N]:
        their indices in the env, ascending (default 0..N-1), when drawing some of its envs (an auto-reset's)."""
        n, size = state.shape[0], self.size
        envs = np.arange(n) if envs is None else envs
        rgb = {c: np.empty((n, size, size, 3), np.uint8) for c in self.cameras}
        depth = {c: np.empty((n, size, size, 1), np.float32) for c in self.cameras} if self.depth else {}
        args = (rgb, depth, state, target, camera_shift, light_scale)
        if not self.threads:
            self.frames[0].draw(envs, range(n), *args)
            return rgb, depth
        bounds = np.linspace(0, n, len(self.frames) + 1).astype(int)
        jobs = [t.submit(f.draw, envs[lo:hi], range(lo, hi), *args)
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
