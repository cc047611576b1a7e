"""A batched MuJoCo Panda tabletop env: the shared machinery of reach, push and pick.

    env = MujocoReachEnv(MujocoReachEnv.Config(), num_envs=64)
    obs, info = env.reset(seed=0)            # state [N, 31], language [N, 64], images/<camera> with `cameras`
    obs, reward, terminated, truncated, info = env.step(action)     # action [N, 4] or [N, 8] in [-1, 1]

Physics lives in one float64 array of MuJoCo full-physics states [N, nstate],
stepped by `sims.mujoco.physics` in native threads; task quantities (targets,
counters, randomized parameters) are numpy arrays beside it (numpy's per-call cost
on these small arrays is a fraction of torch's), turned into tensors at the
VecEnv boundary. Subclasses (tasks.py)
supply the episode sampling, reward, success and instructions.

Actions (all in [-1, 1]), applied for `control_dt` with `substeps` physics steps:
- "ee_delta" [N, 4]: tcp displacement (x, y, z) * ee_step metres of the commanded pose,
  solved to a joint-target step by damped least squares at the commanded joint
  targets, the hand held pointing down; gripper.
- "joint_delta" [N, 8]: joint-target steps * joint_step radians; gripper.
Joint targets accumulate (ManiSkill3's `use_target=True`): the servos (Menagerie's
gains, damping/stiffness = 0.1 s) lag behind, and rebasing each step on the measured
angles would throw the lag away and move at a third of the commanded speed. Targets
stay within `target_band` of the measured angles, so a blocked arm does not wind up.
The gripper entry is absolute: -1 closed, +1 open (ManiSkill3's pd_joint_pos gripper).

Observation `state` (float32):
    [0:7]   joint positions, mapped to [-1, 1] across the limits
    [7]     gripper opening / 8 cm
    [8:15]  joint velocities / 2 rad/s
    [15:18] tcp position (m)           [18:21] cube position (m)     [21:24] target position (m)
    [24:27] cube - tcp                 [27:30] target - (cube, or tcp for reach)
    [30]    1 when both finger pads touch something (a grasp)
With `goal_in_state=false` the two goal rows [21:24] and [27:30] leave `state` (then [N, 25],
the other rows in order) for `privileged` [N, 6] (target, target - (cube or tcp)): a policy
must find the goal in its camera images, while an asymmetric critic may still read it
(Pinto et al. 2018). `observe_state` keeps the full 31 rows (the scripted experts).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import mujoco
import numpy as np
import torch
from tensordict import TensorDict

from embodied.config import check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.specs import Spec, encode_text, text_spec
from sims.mujoco import kinematics as kin
from sims.mujoco import scene
from sims.mujoco.physics import make_stepper, state_size
from sims.mujoco.render import MAX_DEPTH, CameraRenderer

STATE_DIM = 31
GOAL_ROWS = np.r_[21:24, 27:30]  # the state rows that give the goal away (goal_in_state=false moves them)
DEPTH = "depth"  # depth images: depth/<camera> float32 [N, H, W, 1] metres


@dataclass(frozen=True)
class MujocoArmConfig:
    """Control, rendering, randomization and reward settings shared by the Panda tasks."""

    control: Literal["ee_delta", "joint_delta"] = "ee_delta"  # action space, see the module docstring
    control_dt: float = 0.04  # s per step: 25 Hz, ten 4 ms physics steps
    max_episode_steps: int = 50  # steps before truncation (2 s; ManiSkill3's PushCube/PickCube use 50)
    ee_step: float = 0.025  # m of tcp motion per step at action 1 (0.63 m/s; Panda's limit is 1.7 m/s)
    joint_step: float = 0.05  # rad per step at action 1 (1.25 rad/s; Panda joints allow 2.175-2.61 rad/s)
    # m, box the commanded tcp stays in (ee_delta): the floor keeps the fingertips (8 mm below the tcp) off the table
    workspace_low: tuple[float, float, float] = (-0.35, -0.4, 0.012)
    workspace_high: tuple[float, float, float] = (0.35, 0.4, 0.45)
    target_band: float = 0.35  # rad, targets at most this far from the measured angles (full-speed lag: 0.13 rad)
    init_noise: float = 0.02  # rad, std of the Gaussian noise on the rest pose (ManiSkill3's Panda tasks)
    cube_range: float = 0.1  # m, cube x, y uniform in +-range (ManiSkill3 PushCube/PickCube)
    cube_yaw_range: float = 0.0  # rad, cube yaw uniform in +-range
    success_radius: float = 0.05  # m, task-specific meaning (tasks.py)
    success_bonus: float = 10.0  # reward on the step that succeeds (the episode then terminates)
    action_weight: float = 0.01  # reward per step per unit of squared action norm (negative)
    cameras: tuple[str, ...] = ()  # cameras rendered into images/<camera>; choices: scene.CAMERAS
    image_size: int = 64  # square image side, pixels (<= 256, the model's offscreen buffer)
    depth: bool = False  # also render depth/<camera>
    friction_range: tuple[float, float] = (1.0, 1.0)  # cube friction scale, drawn per episode
    mass_range: tuple[float, float] = (1.0, 1.0)  # cube mass (and inertia) scale, drawn per episode
    light_range: tuple[float, float] = (1.0, 1.0)  # light intensity scale, drawn per episode
    camera_jitter: float = 0.0  # m, camera positions shifted uniformly in +-jitter per episode
    stepper: Literal["rollout", "threads"] = "rollout"  # mujoco.rollout's pool is faster (benchmarks/RESULTS.md)
    # native threads stepping the envs, and threads rendering their cameras where GL draws in software (a GL context
    # each; 256 envs, two 48x48 cameras, 2 CPU cores: 2 threads drew the frames 1.97x as fast as 1); on a GPU's driver
    # one renderer draws (an H200 through EGL: 2 threads 0.29x), benchmarks/RESULTS.md "Rendering in threads"
    num_threads: int = 2
    max_instruction_bytes: int = 64  # width of the `language` byte tensor
    goal_in_state: bool = True  # false: the goal rows move from `state` to `privileged` (pixel policies)

    def __post_init__(self):
        valid = ("ee_delta", "joint_delta")
        check(self.control in valid, f"control={self.control!r} is not valid; valid choices: {', '.join(valid)}")
        substeps = self.control_dt / scene.TIMESTEP
        check(abs(substeps - round(substeps)) < 1e-6 and substeps >= 1,
              f"control_dt={self.control_dt} must be a multiple of the physics timestep {scene.TIMESTEP}")
        for name in ("ee_step", "joint_step", "success_radius"):
            check(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be > 0")
        check(self.max_episode_steps >= 2, f"max_episode_steps={self.max_episode_steps} must be >= 2")
        ordered = all(lo < hi for lo, hi in zip(self.workspace_low, self.workspace_high))
        check(ordered, f"workspace_low={self.workspace_low} must be < workspace_high={self.workspace_high}")
        check(self.target_band > 0, f"target_band={self.target_band} must be > 0")
        for name in ("init_noise", "cube_range", "cube_yaw_range", "success_bonus", "action_weight", "camera_jitter"):
            check(getattr(self, name) >= 0, f"{name}={getattr(self, name)} must be >= 0")
        bad = [c for c in self.cameras if c not in scene.CAMERAS]
        check(not bad, f"cameras={bad} unknown; valid choices: {', '.join(scene.CAMERAS)}")
        check(8 <= self.image_size <= 256, f"image_size={self.image_size} must be in [8, 256]")
        for name in ("friction_range", "mass_range", "light_range"):
            lo, hi = getattr(self, name)
            check(0 < lo <= hi, f"{name}={getattr(self, name)} must be (low, high) with 0 < low <= high")
        check(self.stepper in ("rollout", "threads"), f"stepper={self.stepper!r}: valid choices rollout, threads")
        check(self.num_threads >= 1, f"num_threads={self.num_threads} must be >= 1")

    @property
    def substeps(self) -> int:
        return round(self.control_dt / scene.TIMESTEP)


class MujocoArmEnv(VecEnv):
    TASK = ""  # the task's name (tasks.py): the scripted expert and task_progress read it
    """N Panda tabletop worlds; subclasses define the task."""

    Config = MujocoArmConfig
    templates: tuple[str, ...] = ()  # instruction wordings, one drawn per episode
    goal_relative_to = "cube"  # state[27:30] = target - this ("tcp" for reach)
    _state_names = (
        "physics", "sensordata", "joint_target", "target", "steps", "template", "friction", "mass", "light", "camera",
    )
    # the snapshot entries the policy's observation is made from that a robot measures (deploy checks its observations
    # of these names against them): the whole MuJoCo state, which no robot driver supplies today
    snapshot_meaning = {"physics": "MuJoCo Panda tabletop state: time, qpos (rad, m, quaternion wxyz), qvel"}
    action_meaning = {"ee_delta": "tcp displacement / ee_step (m, world z-up); gripper -1 closed, +1 open",
                      "joint_delta": "Panda joint-target steps / joint_step (rad); gripper -1 closed, +1 open"}

    def __init__(self, config: MujocoArmConfig, num_envs: int = 1, device: torch.device | str = "cpu"):
        check(num_envs >= 1, f"num_envs={num_envs} must be >= 1")
        self.config, self.num_envs = config, num_envs
        self.device = resolve_device(str(device))
        self.max_episode_steps = config.max_episode_steps
        self.model = scene.build_model()
        m, n = self.model, num_envs
        check(state_size(m) == 1 + m.nq + m.nv, "unexpected MuJoCo state layout (time, qpos, qvel)")
        self.cube_body, self.cube_geom = m.body("cube").id, m.geom("cube").id
        self.cube_qpos = 1 + m.jnt_qposadr[m.joint("cube").id]  # column of the cube's x in a state row
        self.qvel_col = 1 + m.nq  # column of the first velocity in a state row
        randomized = config.friction_range != (1.0, 1.0) or config.mass_range != (1.0, 1.0)
        self.models = [copy.copy(m) for _ in range(n)] if randomized else [m] * n  # per-env physics parameters
        self.stepper = make_stepper(config.stepper, m, config.num_threads)
        cams = config.cameras
        self.renderer = CameraRenderer(m, cams, config.image_size, config.depth, config.num_threads,
                                       num_envs) if cams else None
        self.lower, self.upper = np.array(scene.JOINT_LOWER), np.array(scene.JOINT_UPPER)
        self.home = np.array(scene.HOME_QPOS)
        self.ws_low, self.ws_high = np.array(config.workspace_low), np.array(config.workspace_high)
        self.down = kin.joint_frames(self.home[None]).rot[0]  # the hand's rest orientation, held in ee_delta mode
        self.instructions = encode_text(list(self.templates), config.max_instruction_bytes)
        self.generator = torch.Generator()
        self.generator.manual_seed(int(torch.randint(0, 2**62, ())))
        # per-env state, all in the snapshot
        self.physics = np.zeros((n, state_size(m)))  # MuJoCo full-physics state rows
        self.sensordata = np.zeros((n, m.nsensordata))  # pad touch forces of the last physics step
        self.joint_target = np.zeros((n, 7))  # rad, commanded arm joint angles
        self.target = np.zeros((n, 3))  # m, the task's goal point
        self.steps = np.zeros(n, dtype=np.int64)
        self.template = np.zeros(n, dtype=np.int64)
        self.friction, self.mass, self.light = np.ones(n), np.ones(n), np.ones(n)  # randomized scales
        self.camera = np.zeros((n, 3))  # m, camera position shifts

        self._state_rows = np.setdiff1d(np.arange(STATE_DIM), [] if config.goal_in_state else GOAL_ROWS)
        self.observation_spec = {"state": Spec((len(self._state_rows),)),
                                 "language": text_spec(config.max_instruction_bytes)}
        if not config.goal_in_state:
            self.observation_spec["privileged"] = Spec((len(GOAL_ROWS),))
        size = config.image_size
        self.metadata = {**self.metadata, "render_fps": 1.0 / config.control_dt}  # a frame per step, for RecordVideo
        for cam in config.cameras:
            self.observation_spec[f"images/{cam}"] = Spec((size, size, 3), torch.uint8)
            if config.depth:
                self.observation_spec[f"{DEPTH}/{cam}"] = Spec((size, size, 1), low=0.0, high=MAX_DEPTH)
        self.action_dim = 4 if config.control == "ee_delta" else 8
        meaning = self.action_meaning[config.control]
        self.action_spec = Spec((self.action_dim,), torch.float32, -1.0, 1.0, meaning=meaning)

    # --- the VecEnv verbs -------------------------------------------------

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_envs(np.arange(self.num_envs))
        return self._observe(), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        cfg = self.config
        if tuple(action.shape) != (self.num_envs, self.action_dim):
            raise ValueError(f"action shape {tuple(action.shape)} != ({self.num_envs}, {self.action_dim})")
        action = np.clip(action.detach().to("cpu", torch.float64).numpy(), -1.0, 1.0)
        self._apply(action)
        self.steps += 1
        q = self._quantities()
        reward, success = self._reward(q)
        reward = reward - cfg.action_weight * np.square(action).sum(-1) + cfg.success_bonus * success
        truncated = (self.steps >= cfg.max_episode_steps) & ~success
        obs = self._observe(q)
        done = success | truncated
        info = {"success": torch.from_numpy(success).to(self.device), "final_obs": obs}
        if done.any():
            idx = np.flatnonzero(done)
            self._reset_envs(idx)
            tcp = q["tcp"].copy()
            tcp[idx] = kin.joint_frames(self.physics[idx, 1:8]).tcp  # kinematics only where the state changed
            obs = self._observe(self._quantities(tcp), obs, idx)
        dev = self.device
        reward = reward.astype(np.float32)
        reward, terminated, truncated = (torch.from_numpy(x).to(dev) for x in (reward, success, truncated))
        return obs, reward, terminated, truncated, info

    @property
    def fork_safe(self) -> bool:
        """train.collect_ahead may step it in a forked worker: the stepper's pool survives a fork (physics.py), a
        camera's GL context does not."""
        return self.renderer is None

    def get_state(self) -> dict[str, torch.Tensor]:
        state = {name: torch.from_numpy(getattr(self, name).copy()) for name in self._state_names}
        state["generator"] = self.generator.get_state()
        return state

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        missing = {*self._state_names, "generator"} - set(state)
        if missing:
            raise KeyError(f"snapshot lacks {sorted(missing)}")
        for name in self._state_names:
            current, value = getattr(self, name), state[name].cpu().numpy()
            if value.shape != current.shape:
                raise ValueError(f"snapshot {name} has shape {value.shape}, env has {current.shape}")
            current[:] = value
        self.generator.set_state(state["generator"].cpu())
        self._apply_parameters(np.arange(self.num_envs))
        return self._observe()

    def close(self) -> None:
        self.stepper.close()
        if self.renderer is not None:
            self.renderer.close()

    # --- task hooks (tasks.py) --------------------------------------------

    def _sample_task(self, m: int, cube_xy: np.ndarray) -> np.ndarray:
        """Target positions [M, 3] for M new episodes, given their cube positions [M, 2]."""
        raise NotImplementedError

    def _reward(self, q: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(shaped reward [N] float64, success [N] bool) from the quantities of `_quantities`."""
        raise NotImplementedError

    # --- internals --------------------------------------------------------

    @property
    def qpos(self) -> np.ndarray:
        """[N, 7] arm joint angles, rad (a view into the physics state)."""
        return self.physics[:, 1:8]

    def _quantities(self, tcp: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Task quantities of the current state; `tcp` [N, 3] when already known."""
        phys = self.physics
        return {
            "tcp": kin.joint_frames(phys[:, 1:8]).tcp if tcp is None else tcp,
            "cube": phys[:, self.cube_qpos : self.cube_qpos + 3],
            "target": self.target,
            "grasped": (self.sensordata > 0.5).all(-1),  # N of normal force on each pad: a grasp, not a graze
            "opening": phys[:, 8] + phys[:, 9],
        }

    def _apply(self, action: np.ndarray) -> None:
        """Joint targets from the action, then `substeps` physics steps in every env."""
        cfg, qpos, target = self.config, self.qpos, self.joint_target
        if cfg.control == "ee_delta":
            frames = kin.joint_frames(target)  # IK about the commanded pose, not the lagging measured one
            goal = np.clip(frames.tcp + action[:, :3] * cfg.ee_step, self.ws_low, self.ws_high)
            dq = kin.dls_ik(frames, goal - frames.tcp, self.down)
        else:
            dq = action[:, :7] * cfg.joint_step
        target = np.clip(np.clip(target + dq, self.lower, self.upper), qpos - cfg.target_band, qpos + cfg.target_band)
        self.joint_target = target
        fingers = (action[:, -1:] + 1.0) * 0.5 * scene.FINGER_MAX
        ctrl = np.concatenate([target, fingers, fingers], -1)
        self.physics, self.sensordata = self.stepper.step(self.models, self.physics, ctrl, cfg.substeps)

    def observe_state(self) -> torch.Tensor:
        """The full state [N, 31] of the current step, goal rows included, without rendering (scripted experts)."""
        return torch.from_numpy(self._state(self._quantities())).to(self.device)

    def expert_action(self) -> torch.Tensor:
        """The scripted expert's action [N, A] (sims/mujoco/scripted.py): demonstrations, `embodied record
        --operator scripted` and the scripted correction operator act with it."""
        from sims.mujoco.scripted import expert

        return expert(self)

    def task_progress(self, obs) -> tuple[torch.Tensor, torch.Tensor]:
        """(distance still to go [N] m, fraction of the time limit used [N]), what a person watching sees: the tcp
        to the target, plus the tcp to the cube where one must first be reached (push, pick). The scripted
        operator's rule (embodied/hil/operators.py) steps in when it stops shrinking."""
        state = self.full_state(obs)  # [24:27] cube - tcp, [27:30] target - (cube or tcp); the goal may sit in privileged
        distance = state[:, 27:30].norm(dim=-1)
        if self.TASK != "reach":  # the way to the cube first (push, pick)
            distance = distance + state[:, 24:27].norm(dim=-1)
        return distance, torch.from_numpy(self.steps / self.max_episode_steps).to(distance)

    def full_state(self, obs) -> torch.Tensor:
        """The full state [N, 31] of an observation of this env: `state` itself, or with `goal_in_state=false`
        its rows and the goal rows of `privileged` put back in the documented layout (operators, experts)."""
        if self.config.goal_in_state:
            return obs["state"]
        state = obs["state"].new_empty(obs["state"].shape[0], STATE_DIM)
        state[:, self._state_rows], state[:, GOAL_ROWS] = obs["state"], obs["privileged"]
        return state

    def _state(self, q: dict[str, np.ndarray]) -> np.ndarray:
        phys, v = self.physics, self.qvel_col
        return np.concatenate(
            [
                2.0 * (phys[:, 1:8] - self.lower) / (self.upper - self.lower) - 1.0,
                q["opening"][:, None] / (2 * scene.FINGER_MAX),
                phys[:, v : v + 7] / 2.0,
                q["tcp"], q["cube"], q["target"], q["cube"] - q["tcp"], q["target"] - q[self.goal_relative_to],
                q["grasped"][:, None],
            ],
            -1,
        ).astype(np.float32)

    def _observe(self, q: dict[str, np.ndarray] | None = None, drawn: TensorDict | None = None,
                 changed: np.ndarray | None = None) -> TensorDict:
        """The observation of every env; with `drawn` (this step's observation before the envs `changed` were
        reset) the cameras draw only those envs and the others' frames are copied from it: a rollout at 256 envs
        resets some env nearly every step, and drawing them all twice doubled the rendering."""
        q = self._quantities() if q is None else q
        state = self._state(q)
        out = {"language": self.instructions[torch.from_numpy(self.template)]}
        if self.config.goal_in_state:
            out["state"] = torch.from_numpy(state)
        else:
            out["state"] = torch.from_numpy(state[:, self._state_rows])
            out["privileged"] = torch.from_numpy(state[:, GOAL_ROWS])
        if self.renderer is not None and drawn is not None:
            rgb, depth = self.renderer.render(self.physics[changed], self.target[changed], self.camera[changed],
                                              self.light[changed], changed)
            rows = torch.from_numpy(changed).to(drawn.device)
            for group, fresh in (("images", rgb), (DEPTH, depth)):
                if fresh:
                    out[group] = {c: drawn[group, c].clone() for c in fresh}  # `drawn` stays the final observation
                    for c, v in fresh.items():
                        out[group][c][rows] = torch.from_numpy(v).to(drawn.device)
        elif self.renderer is not None:
            rgb, depth = self.renderer.render(self.physics, self.target, self.camera, self.light)
            out["images"] = {c: torch.from_numpy(v) for c, v in rgb.items()}
            if depth:
                out[DEPTH] = {c: torch.from_numpy(v) for c, v in depth.items()}
        obs = TensorDict(out, batch_size=[self.num_envs])
        return obs if self.device.type == "cpu" else obs.to(self.device)

    def _uniform(self, *shape: int, low=-1.0, high=1.0) -> np.ndarray:
        return low + (high - low) * torch.rand(shape, generator=self.generator, dtype=torch.float64).numpy()

    def _reset_envs(self, idx: np.ndarray) -> None:
        """New episode in envs idx: arm pose, cube, target, wording, randomized parameters."""
        cfg, m = self.config, idx.size
        noise = cfg.init_noise * torch.randn((m, 7), generator=self.generator, dtype=torch.float64).numpy()
        cube_xy = self._uniform(m, 2) * cfg.cube_range
        yaw = self._uniform(m) * cfg.cube_yaw_range
        rows = np.zeros((m, self.physics.shape[1]))  # time 0, zero velocities
        rows[:, 1:8] = np.clip(self.home + noise, self.lower, self.upper)
        rows[:, 8:10] = scene.FINGER_MAX
        c = self.cube_qpos
        rows[:, c : c + 2], rows[:, c + 2] = cube_xy, scene.CUBE_HALF
        rows[:, c + 3], rows[:, c + 6] = np.cos(yaw / 2), np.sin(yaw / 2)  # quaternion (w, 0, 0, z) of the yaw
        self.physics[idx] = rows
        self.sensordata[idx] = 0.0
        self.joint_target[idx] = rows[:, 1:8]
        self.target[idx] = self._sample_task(m, cube_xy)
        self.template[idx] = torch.randint(len(self.templates), (m,), generator=self.generator).numpy()
        self.steps[idx] = 0
        self.friction[idx] = self._uniform(m, low=cfg.friction_range[0], high=cfg.friction_range[1])
        self.mass[idx] = self._uniform(m, low=cfg.mass_range[0], high=cfg.mass_range[1])
        self.light[idx] = self._uniform(m, low=cfg.light_range[0], high=cfg.light_range[1])
        self.camera[idx] = self._uniform(m, 3) * cfg.camera_jitter
        self._apply_parameters(idx)

    def _apply_parameters(self, idx: np.ndarray) -> None:
        """Write the randomized friction and mass of envs idx into their models."""
        if self.models[0] is self.model:
            return
        base = self.model
        for i in idx.tolist():
            model = self.models[i]
            model.geom_friction[self.cube_geom, 0] = base.geom_friction[self.cube_geom, 0] * self.friction[i]
            model.body_mass[self.cube_body] = base.body_mass[self.cube_body] * self.mass[i]
            model.body_inertia[self.cube_body] = base.body_inertia[self.cube_body] * self.mass[i]
