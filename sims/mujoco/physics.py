"""Stepping many MuJoCo worlds at once in native threads (no subprocesses).

    stepper = make_stepper("rollout", model, num_threads=2)
    state, sensordata = stepper.step(models, state, ctrl, nstep)   # numpy, in place on `state`

The batch's truth is one float64 array `state` [N, nstate] of MuJoCo's full physics
state (mjSTATE_FULLPHYSICS: time, qpos, qvel, act, ...). Both steppers load each
row into a per-thread scratch `MjData`, apply the row's `ctrl` for `nstep` physics
steps with a cold solver warmstart, and write the state and the last step's sensor
data back. Stepping is therefore a pure function of (model, state, ctrl): rows are
independent of thread scheduling and of each other, and a snapshot of `state` is
an exact snapshot of the physics.

- "rollout": `mujoco.rollout.Rollout`, MuJoCo's own C++ thread pool, kept alive
  between calls; the whole batch is one call that releases the GIL.
- "threads": a `ThreadPoolExecutor` over contiguous chunks of rows, each worker
  calling `mj_setState` / `mj_step(nstep)` / `mj_getState`, which release the GIL.

Both survive a fork (train.collect_ahead steps the envs in a forked worker): a fork
copies no threads, so a pool made in another process is replaced by a new one at
the first step in this one (the old pool was left to wait on threads that no longer
exist, and the child hung); the old one is kept, never shut down, since joining
threads that are not there would hang too.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

import mujoco
import numpy as np

FULLPHYSICS = mujoco.mjtState.mjSTATE_FULLPHYSICS.value
CTRL = mujoco.mjtState.mjSTATE_CTRL.value


def state_size(model: mujoco.MjModel) -> int:
    return mujoco.mj_stateSize(model, FULLPHYSICS)


class ProcessPool:
    """A thread pool of this process: `get()` makes a new one in a forked child (see the module's docstring)."""

    def __init__(self, make: Callable):
        self.make, self.pool, self.pid, self.orphans = make, make(), os.getpid(), []

    def get(self):
        if self.pid != os.getpid():
            self.orphans.append(self.pool)  # the parent's: its threads are not here, so it is never joined
            self.pool, self.pid = self.make(), os.getpid()
        return self.pool

    def close(self, shutdown: Callable) -> None:
        if self.pid == os.getpid():
            shutdown(self.pool)


class RolloutStepper:
    """`mujoco.rollout` with a persistent thread pool."""

    def __init__(self, model: mujoco.MjModel, num_threads: int):
        from mujoco import rollout

        self.num_threads = num_threads
        self.pool = ProcessPool(lambda: rollout.Rollout(nthread=num_threads if num_threads > 1 else 0))
        self.datas = [mujoco.MjData(model) for _ in range(max(1, num_threads))]
        self._buffers: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def step(
        self, models: Sequence[mujoco.MjModel], state: np.ndarray, ctrl: np.ndarray, nstep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        n = ctrl.shape[0]
        key = (n, nstep)
        if key not in self._buffers:
            m = models[0]
            self._buffers[key] = (
                np.empty((n, nstep, state.shape[1])),
                np.empty((n, nstep, m.nsensordata)),
                np.zeros((n, m.nv)),  # cold warmstart: every call is a pure function of the state
            )
        states, sensors, warmstart = self._buffers[key]
        control = np.repeat(ctrl[:, None, :], nstep, axis=1)  # held for the nstep physics steps
        # chunks of about one per thread keep the pool's per-task overhead small (MuJoCo's
        # default of nbatch / (10 * nthread) is tuned for long rollouts, not for 10 steps)
        chunk = max(1, n // max(1, 2 * self.num_threads))
        self.pool.get().rollout(
            list(models), self.datas, state, control, control_spec=CTRL, skip_checks=True, nstep=nstep,
            initial_warmstart=warmstart, state=states, sensordata=sensors, chunk_size=chunk,
        )
        state[:] = states[:, -1]
        return state, sensors[:, -1]

    def close(self) -> None:
        self.pool.close(lambda pool: pool.close())


class ThreadStepper:
    """A Python thread pool over chunks of rows; MuJoCo releases the GIL in `mj_step`."""

    def __init__(self, model: mujoco.MjModel, num_threads: int):
        self.num_threads = max(1, num_threads)
        self.pool = ProcessPool(lambda: ThreadPoolExecutor(self.num_threads)) if self.num_threads > 1 else None
        self.datas = [mujoco.MjData(model) for _ in range(self.num_threads)]

    def step(
        self, models: Sequence[mujoco.MjModel], state: np.ndarray, ctrl: np.ndarray, nstep: int
    ) -> tuple[np.ndarray, np.ndarray]:
        n = state.shape[0]
        sensors = np.empty((n, models[0].nsensordata))

        def work(worker: int) -> None:
            data = self.datas[worker]
            for i in range(worker * n // self.num_threads, (worker + 1) * n // self.num_threads):
                model = models[i] if len(models) > 1 else models[0]
                mujoco.mj_setState(model, data, state[i], FULLPHYSICS)
                data.qacc_warmstart[:] = 0.0
                data.ctrl[:] = ctrl[i]
                mujoco.mj_step(model, data, nstep)
                mujoco.mj_getState(model, data, state[i], FULLPHYSICS)
                sensors[i] = data.sensordata

        if self.pool is None:
            work(0)
        else:
            list(self.pool.get().map(work, range(self.num_threads)))
        return state, sensors

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close(lambda pool: pool.shutdown())


STEPPERS = {"rollout": RolloutStepper, "threads": ThreadStepper}


def make_stepper(kind: str, model: mujoco.MjModel, num_threads: int) -> RolloutStepper | ThreadStepper:
    if kind not in STEPPERS:
        raise ValueError(f"stepper={kind!r} is not valid; valid choices: {', '.join(STEPPERS)}")
    return STEPPERS[kind](model, num_threads)
