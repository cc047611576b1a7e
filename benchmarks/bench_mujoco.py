"""Batched MuJoCo Panda env (sims.mujoco) vs gymnasium's SyncVectorEnv over the same model,
vs raw MuJoCo stepping of the same model, and camera frame rates.

    python benchmarks/bench_mujoco.py [--sizes 8,64] [--rounds 7] [--steps 30]

Contenders, all on the scene of sims/mujoco/scene.py with 10 physics steps per env step
and joint-delta control, timed in interleaved rounds so load from other processes hits
each alike (median and min-max over rounds):
- ours: `MujocoReachEnv.step` (control=joint_delta): threads, observations, reward, auto-reset;
- gym: `gymnasium.vector.SyncVectorEnv` of a `gymnasium.envs.mujoco.MujocoEnv` subclass doing
  the same per-env work (set targets, `do_simulation` 10 steps, observation, reward);
- raw rollout: `mujoco.rollout` alone (MuJoCo's thread pool, as ours uses) replaying exactly the
  states and controls ours stepped in the same round, i.e. the same physics with no env around
  it: the overhead reference;
- raw loop: the same replay on one thread, `mj_setState; d.ctrl[:] = ...; mj_step(m, d, 10)` per env.
Cameras: `CameraRenderer.render` of the front camera, frames/s at 64x64 and 128x128.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sims.mujoco import MujocoReachEnv, scene  # noqa: E402  (sets MUJOCO_GL before mujoco is imported)

import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402
from gymnasium.envs.mujoco import MujocoEnv  # noqa: E402

SUBSTEPS = 10


class GymPandaReach(MujocoEnv):
    """The same task as a single gymnasium MuJoCo env: joint-delta targets, tcp-to-target reward."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 25}

    def __init__(self, xml_path: str, **kwargs):
        space = gym.spaces.Box(-np.inf, np.inf, (34,), np.float64)
        super().__init__(xml_path, SUBSTEPS, observation_space=space, width=64, height=64, **kwargs)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (8,), np.float32)
        self.tcp = self.model.site("tcp").id
        self.target = np.zeros(3)

    def step(self, action):
        ctrl = np.empty(9)
        ctrl[:7] = np.clip(self.data.qpos[:7] + 0.05 * action[:7], scene.JOINT_LOWER, scene.JOINT_UPPER)
        ctrl[7:] = (action[7] + 1.0) * 0.5 * scene.FINGER_MAX
        self.do_simulation(ctrl, SUBSTEPS)
        distance = np.linalg.norm(self.data.site_xpos[self.tcp] - self.target)
        return self._obs(), -distance, bool(distance < 0.03), False, {}

    def reset_model(self):
        qpos = self.init_qpos.copy()
        qpos[:7] = scene.HOME_QPOS + self.np_random.normal(0, 0.02, 7)
        qpos[7:9] = scene.FINGER_MAX
        self.set_state(qpos, np.zeros(self.model.nv))
        self.target = self.np_random.uniform((-0.15, -0.2, 0.05), (0.15, 0.2, 0.35))
        return self._obs()

    def _obs(self):
        return np.concatenate([self.data.qpos, self.data.qvel, self.data.site_xpos[self.tcp]])


def timed(fn, steps: int) -> float:
    start = time.perf_counter()
    for t in range(steps):
        fn(t)
    return (time.perf_counter() - start) / steps


def bench_stepping(num_envs: int, rounds: int, steps: int, xml_path: str) -> dict[str, list[float]]:
    """Seconds per batched step of each contender, one entry per round."""
    ours = MujocoReachEnv(MujocoReachEnv.Config(control="joint_delta", max_episode_steps=50), num_envs)
    ours.reset(seed=0)
    gym_env = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.TimeLimit(GymPandaReach(xml_path), 50) for _ in range(num_envs)]
    )
    gym_env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.rand(num_envs, 8, generator=gen) * 2 - 1 for _ in range(steps)]
    np_actions = [a.numpy() for a in actions]
    # raw: exactly the physics ours ran this round (its stepper's inputs, recorded), with no env around it
    recorded: list[tuple[np.ndarray, np.ndarray]] = []
    step_physics = ours.stepper.step

    def recording_step(models, state, ctrl, nstep):
        recorded.append((state.copy(), ctrl.copy()))
        return step_physics(models, state, ctrl, nstep)

    ours.stepper.step = recording_step
    model = ours.model
    data = mujoco.MjData(model)

    def raw_rollout(t):
        state, ctrl = recorded[t]
        step_physics(ours.models, state.copy(), ctrl, SUBSTEPS)

    def raw_loop(t):
        state, ctrl = recorded[t]
        for row, c in zip(state, ctrl):
            mujoco.mj_setState(model, data, row, mujoco.mjtState.mjSTATE_FULLPHYSICS)
            data.qacc_warmstart[:] = 0.0
            data.ctrl[:] = c
            mujoco.mj_step(model, data, SUBSTEPS)

    contenders = {  # ours first in every round: the raw contenders replay what it recorded
        "ours": lambda t: ours.step(actions[t]),
        "gym SyncVectorEnv": lambda t: gym_env.step(np_actions[t]),
        "raw rollout": raw_rollout,
        "raw loop (1 thread)": raw_loop,
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round in range(rounds + 1):  # round 0 warms up
        recorded.clear()
        for name, fn in contenders.items():
            seconds = timed(fn, steps)
            if round:
                times[name].append(seconds)
    gym_env.close()
    ours.close()
    return times


def bench_camera(size: int, rounds: int, num_envs: int = 8) -> list[float]:
    """Frames/s of the front camera at size x size, one entry per round."""
    env = MujocoReachEnv(MujocoReachEnv.Config(cameras=("front",), image_size=size), num_envs)
    env.reset(seed=0)
    args = (env.physics, env.target, env.camera, env.light)
    env.renderer.render(*args)
    fps = []
    for _ in range(rounds):
        seconds = timed(lambda t: env.renderer.render(*args), 5)
        fps.append(num_envs / seconds)
    env.close()
    return fps


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8,64")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    print(f"mujoco {mujoco.__version__}, gymnasium {gym.__version__}, {os.cpu_count()} CPUs, load {load:.1f}")
    with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
        f.write(scene.scene_xml())
    print("\n| envs | contender | env-steps/s, median (min-max) | ratio of medians |")
    print("|---:|---|---:|---|")
    for n in (int(s) for s in args.sizes.split(",")):
        times = bench_stepping(n, args.rounds, args.steps, f.name)
        med = {k: statistics.median(v) for k, v in times.items()}
        for name, t in times.items():
            if name == "ours":
                speedup, overhead = med["gym SyncVectorEnv"] / med["ours"], med["ours"] / med["raw rollout"] - 1
                ratio = f"{speedup:.2f}x gym; overhead over raw rollout {overhead:+.1%}"
            else:
                ratio = f"ours / this = {med[name] / med['ours']:.2f}x"
            print(f"| {n} | {name} | {summary([n / x for x in t])} | {ratio} |")
    os.unlink(f.name)
    print("\n| camera | frames/s, median (min-max) |\n|---|---:|")
    for size in (64, 128):
        print(f"| front {size}x{size} RGB | {summary(bench_camera(size, args.rounds))} |")


if __name__ == "__main__":
    main()
