"""Crazyflie quadrotor VecEnvs (contract: `embodied.envs`): the shared base `_QuadrotorEnv` and the hover task.

The waypoint task lives in sims/quadrotor/waypoint.py. Both tasks share `_QuadrotorEnv`: physics
(`dynamics.QuadrotorDynamics`, RK4 at dt), per-episode domain randomization, initial-state sampling, observations,
auto-reset and snapshots; a task adds its target, reward terms and success rule.

Every per-env quantity lives in one component-major tensor S [rows, N] (layout
below), so a reset is a column copy and a snapshot is S plus the generator.
Auto-reset has two modes (`reset_mode`): "masked" samples candidates for every
env and selects with one `torch.where` (no host sync: the choice on GPU);
"indexed" samples only the finished envs, which needs `nonzero()` and so a host
sync: free on CPU, where it was 1.1-1.45x faster at N=4096 and 65536
(benchmarks/RESULTS.md).
On CUDA the step is ~100 small kernels, so the sim is launch-bound below ~10^5 envs (1.3-1.7 ms per step
from N = 4096 to 262144 on an H200): `cuda_graph` captures the masked step once and replays it, the
uniform draws made before each replay from the same generator, so the stream of episodes is the eager one.

Action [N, 4] in [-1, 1] (clipped): rotor-speed setpoints, monotone, with 0 =
hover speed of the NOMINAL vehicle, -1 = 0 RPM, +1 = max RPM (piecewise linear
in thrust, see `step`).
Centring actions on hover is common in RL for quadrotors (gym-pybullet-drones,
ActionType.RPM: HOVER_RPM * (1 + 0.05 a)); a fresh policy (mean 0) then starts
near hover instead of having to discover it.

Observation "state" [N, 22] (waypoint [N, 25]), SI units:
    0:3 position error p - target (world)   3:6 velocity (world)   6:9 body rates
    9:18 rotation matrix body->world, row-major   18:22 previous action
    22:25 (waypoint) p - the waypoint after the current one (the current one when last)
    +4 (obs_motor_estimate) rotor speeds 2 m - 1 predicted from the past setpoints
       with the nominal motor time constant: the rotors lag 0.15 s behind the action
       and are not measured on a real Crazyflie, but this prediction is computable
       on board (as learning-to-fly's action history). With it, PPO (8M steps, 4096
       envs, defaults, one seed) hovered 0.14 m from the target (median) instead of 0.58 m.
    +1 (obs_accelerometer) the accelerometer: body-z specific force / g - 1 (0 in a nominal hover).
       In this drag-free model the specific force is thrust / mass along body z (x and y read 0),
       so with the motor estimate it reveals the randomized thrust-to-weight ratio, which a
       memoryless policy cannot otherwise see: without it, hover policies settled off target in z
       in proportion to that ratio (correlation 0.97-0.99 over 1000 episodes).
       The Crazyflie 2.1 measures it with its BMI088 IMU.
Observation "privileged" [N, 9], for an asymmetric critic: rotor speeds (2 m - 1);
the randomized mass, thrust-coefficient and motor-time-constant multipliers as
(s - 1) / range (0 when not randomized); elapsed fraction of the episode; task
progress (hover: in-tolerance streak / hold steps, waypoint: reached / K). With `privileged_disturbance`,
13 more rows: the episode's disturbance draws as the critic sees them (disturbance.PRIVILEGED_ROWS; all 0
under "none"), so that its value need not average over payloads, weak rotors and winds it cannot tell apart.
The world is free space: there is no ground contact model.
Disturbances (`disturbance`: pushes, gusts, a payload, weak or slow motors) are presets drawn per
episode into rows appended to S (sims/quadrotor/disturbance.py); "none" leaves the env as it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.specs import Meaning, Spec
from sims.quadrotor import disturbance
from sims.quadrotor.dynamics import (
    ANG_VEL, MOTOR, POS, QUAT, STATE_DIM, VEL, CrazyflieParams, QuadrotorDynamics, row_buffer,
)  # fmt: skip

# Rows of S after the physics state (rows 0:17, see dynamics).
DR = slice(17, 20)  # multipliers of the nominal mass, thrust coefficient, motor time constant
STEP = 20  # steps since reset
PROGRESS = 21  # hover: in-tolerance streak (steps); waypoint: index of the current waypoint
TARGET = slice(22, 25)  # current target position, world, m
PREV_ACTION = slice(25, 29)  # action of the previous step (0 after reset)
MOTOR_ESTIMATE = slice(29, 33)  # rotor speeds predicted from past setpoints with the nominal time constant
SPECIFIC_FORCE = 33  # body-z specific force (thrust / mass) after the step, in g: what the IMU's accelerometer reads
BASE_ROWS = 34
PRIVILEGED = slice(13, 22)  # motor, DR, step, progress: obs["privileged"] is an affine map of these
N_PRIVILEGED = PRIVILEGED.stop - PRIVILEGED.start  # its rows (the disturbance's follow, privileged_disturbance)
# Rows of the reward features F (task rows follow); reward = bias + weights @ F.
F_NORMS, F_QUAT2, F_ACTION, F_SMOOTH, F_CRASH, F_TASK = slice(0, 3), slice(3, 7), 7, 8, 9, 10


@dataclass(frozen=True)
class QuadrotorConfig:
    """Settings shared by both tasks; reward terms are documented on each env class."""

    dt: float = 0.01  # control and physics step, s (100 Hz; learning-to-fly's integration dt)
    episode_s: float = 3.0  # time limit, s; reaching it truncates the episode
    init_pos: float = 0.5  # initial position per axis, uniform in +-init_pos, m
    init_vel: float = 0.5  # initial velocity per axis, uniform in +-init_vel, m/s
    init_ang_vel: float = 1.0  # initial body rates per axis, uniform in +-init_ang_vel, rad/s
    init_max_tilt_deg: float = 30.0  # initial tilt (body z vs world z) uniform in [0, this], deg
    init_max_yaw_deg: float = 180.0  # initial yaw uniform in +-this, deg
    dr_mass: float = 0.1  # per-episode mass multiplier uniform in 1 +- dr_mass (0 disables)
    dr_thrust: float = 0.1  # per-episode thrust (and yaw torque) coefficient multiplier, 1 +- dr_thrust
    dr_motor_tau: float = 0.3  # per-episode motor time constant multiplier, 1 +- dr_motor_tau
    max_pos: float = 2.0  # crash when the distance from the origin exceeds this, m
    max_speed: float = 10.0  # crash above this speed, m/s
    max_ang_vel: float = 35.0  # crash above this body-rate norm, rad/s (~ the Crazyflie 2.1's 2000 deg/s gyro range)
    alive_bonus: float = 1.0  # reward per step survived
    w_pos: float = 0.5  # weight of the distance to the target, per m
    w_vel: float = 0.01  # weight of the speed, per m/s
    w_ang_vel: float = 0.0025  # weight of the body-rate norm, per rad/s
    w_tilt: float = 0.05  # weight of 1 - R_zz (0 level, 2 upside down)
    w_action: float = 0.025  # weight of the mean squared action
    w_smooth: float = 0.025  # weight of the mean squared action change
    crash_penalty: float = 5.0  # subtracted on the step that crashes
    # the step's reward before the crash penalty is clipped below at this (None: not clipped). 0: flying on never pays
    # less than crashing, as dm_control's rewards in [0, 1] (Tassa et al. 2018); without it a hover step more than
    # alive_bonus / w_pos from the target pays < 0, and PPO first learned to crash sooner (benchmarks/RESULTS.md)
    reward_floor: float | None = None
    # latency from the observation to the motor command, in control periods (at most 1): env i of N waits
    # action_delay * i / (N - 1) of a period (0 with one env), so a batch spans 0 to action_delay; during that wait
    # the previous setpoint holds, modelled as their blend over the step (the rotors' 0.15 s lag smooths the rest).
    # A real loop has it: the MAVLink vehicle's telemetry is up to a period old when the command leaves
    # (benchmarks/RESULTS.md, "Latency in training"). 0: the command acts at once
    action_delay: float = 0.0
    reset_mode: Literal["auto", "masked", "indexed"] = "auto"  # auto-reset sampling (module doc); auto: indexed on CPU
    obs_motor_estimate: bool = False  # append MOTOR_ESTIMATE (2 m - 1) to obs["state"], see the module doc
    obs_accelerometer: bool = False  # append the accelerometer (body-z specific force / g - 1), see the module doc
    # per-episode disturbances beyond the nominal randomization, sims/quadrotor/disturbance.py (none: the nominal env)
    disturbance: Literal["none", "push", "gust", "payload", "motor", "all", "mix"] = "none"
    # append the episode's disturbance draws to obs["privileged"] (13 rows, module doc) for an asymmetric critic;
    # the actor never sees them. The same width under every preset, so a run evaluates under any
    privileged_disturbance: bool = False
    # on CUDA with the masked reset (reset_mode auto or masked): replay the step as one captured CUDA graph (module
    # doc). The same results as the eager step (tests/sims/test_quadrotor.py); 6.3x fewer ms per step at N = 4096
    # on an H200, PPO end-to-end 1.47x (benchmarks/RESULTS.md). Ignored on CPU
    cuda_graph: bool = True

    def __post_init__(self):
        check(0 < self.dt <= 0.02, f"dt={self.dt} must be in (0, 0.02] s (RK4 accuracy and motor-lag stability)")
        check(self.episode_s >= self.dt, f"episode_s={self.episode_s} must be at least one step (dt={self.dt})")
        for name in ("init_pos", "init_vel", "init_ang_vel", "w_pos", "w_vel", "w_ang_vel", "w_tilt",
                     "w_action", "w_smooth", "crash_penalty"):  # fmt: skip
            check(getattr(self, name) >= 0, f"{name}={getattr(self, name)} must be >= 0")
        check(0 <= self.init_max_tilt_deg <= 180, f"init_max_tilt_deg={self.init_max_tilt_deg} must be in [0, 180]")
        check(0 <= self.init_max_yaw_deg <= 180, f"init_max_yaw_deg={self.init_max_yaw_deg} must be in [0, 180]")
        for name in ("dr_mass", "dr_thrust"):
            check(0 <= getattr(self, name) < 0.5, f"{name}={getattr(self, name)} must be in [0, 0.5)")
        check(0 <= self.action_delay <= 1, f"action_delay={self.action_delay} must be in [0, 1] control periods")
        check(0 <= self.dr_motor_tau < 0.9, f"dr_motor_tau={self.dr_motor_tau} must be in [0, 0.9)")
        tau_min = CrazyflieParams().motor_time_constant * (1 - self.dr_motor_tau)
        check(self.dt < tau_min, f"dt={self.dt} must be below the smallest motor time constant {tau_min:.3f} s")
        for name in ("max_pos", "max_speed", "max_ang_vel"):
            check(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be > 0")
        check(self.disturbance in disturbance.PRESETS,
              f"disturbance={self.disturbance!r} is not a preset; valid presets: {', '.join(disturbance.PRESETS)}")


class _QuadrotorEnv(VecEnv):
    """Shared machinery; a task sets Config, the class constants below and the _task_* hooks."""

    fork_safe = True  # pure torch: train.collect_ahead forks a worker that steps it

    Config = QuadrotorConfig
    _TASK_ROWS = 0  # rows of S after BASE_ROWS
    _TASK_FEATURES = 0  # reward feature rows after F_TASK
    _OBS_DIM = 22
    _NOISE_ROWS = 15  # uniform samples per reset: 9 box (p, v, w), 3 angles, 3 DR
    _COUNTERS = ("step", "progress")  # integer-valued blocks of get_state
    # the snapshot entries the policy's observation is made from that a robot measures (deploy overwrites them
    # with its observations and checks that they mean the same); the others are the task's own bookkeeping
    snapshot_meaning = {"position": Meaning.POSITION, "velocity": Meaning.VELOCITY, "quaternion": Meaning.QUATERNION,
                        "angular_velocity": Meaning.ANGULAR_VELOCITY,
                        "specific_force": Meaning.SPECIFIC_FORCE}  # fmt: skip

    def __init__(self, config: QuadrotorConfig, num_envs: int = 1, device: torch.device | str = "cpu"):
        if not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} needs a {self.Config.__name__}, got {type(config).__name__}")
        check(num_envs >= 1, f"num_envs={num_envs} must be >= 1")
        self.config, self.num_envs, self.device = config, num_envs, resolve_device(str(device))
        self.params = p = CrazyflieParams()
        self.max_episode_steps = max(1, round(config.episode_s / config.dt))
        self.action_spec = Spec((4,), torch.float32, -1.0, 1.0, meaning=Meaning.MOTOR_COMMAND)
        self._privileged_disturbance = config.privileged_disturbance
        self._n_priv = N_PRIVILEGED + (disturbance.PRIVILEGED_ROWS if config.privileged_disturbance else 0)
        self._obs_dim = self._OBS_DIM + (4 if config.obs_motor_estimate else 0) + (1 if config.obs_accelerometer else 0)
        # state: unbounded, a free body's position and velocities (the crash limits bound them only up to the
        # step that crosses them, whose final observation lies past). privileged: rotor speeds and randomized
        # multipliers mapped to [-1, 1], fractions of the episode and of the task (a hover streak runs on past
        # its hold steps); 0.01 leaves room for float rounding at the edges
        progress = max(1.0, self._progress_max() / self._progress_norm())
        privileged = Spec((self._n_priv,), low=-1.01, high=progress + 0.01)
        self.observation_spec = {keys.STATE: Spec((self._obs_dim,)), keys.PRIVILEGED: privileged}
        mode = config.reset_mode
        self._indexed_reset = mode == "indexed" or (mode == "auto" and self.device.type == "cpu")
        self._graphed = config.cuda_graph and self.device.type == "cuda" and not self._indexed_reset
        self._graph = None  # captured at the first step (CUDA and cuda_graph only)
        n, dev = num_envs, self.device
        new = lambda rows: row_buffer(rows, n, dev)  # noqa: E731
        col = lambda values: torch.tensor(values, dtype=torch.float32, device=dev).view(-1, 1)  # noqa: E731
        self._dist_rows = slice(BASE_ROWS + self._TASK_ROWS, BASE_ROWS + self._TASK_ROWS
                                + (disturbance.ROWS if config.disturbance != "none" else 0))
        self._s = new(self._dist_rows.stop)  # the state of every env
        self._init = new(self._dist_rows.stop)  # next-episode candidates; rows not sampled stay constant
        self._init[MOTOR] = self._init[MOTOR_ESTIMATE] = p.hover_fraction
        self.dynamics = QuadrotorDynamics(self._s[:STATE_DIM], p, config.dt)
        self._disturbance = None if config.disturbance == "none" else disturbance.Disturbances(
            config.disturbance, self._s[self._dist_rows], self._s, self.max_episode_steps, p)
        self._gen = torch.Generator(device=dev)
        self._gen.seed()
        # bound views and scratch: a torch call costs microseconds on CPU, so step makes few views
        s = self._s
        self._dr, self._step_row, self._progress, self._prev_action = s[DR], s[STEP], s[PROGRESS], s[PREV_ACTION]
        self._motor_estimate, self._specific_force = s[MOTOR_ESTIMATE], s[SPECIFIC_FORCE : SPECIFIC_FORCE + 1]
        self._motor, self._sq4 = s[MOTOR], new(4)
        self._thrust_to_g = 4 * p.max_thrust / (p.mass * p.gravity)  # mean rotor thrust (fraction of max) -> g
        self._estimate_gain = 1 - math.exp(-config.dt / p.motor_time_constant)  # exact first-order lag over dt
        self._kf_scale, self._kin, self._quat = s[DR.start + 1 : DR.start + 2], s[:9], s[QUAT]
        self._action, self._cmd, self._tmp4, self._sq9 = new(4), new(4), new(4), new(9)
        # per env: the fraction of the step its new setpoint acts (1 - its delay); None: no delay
        self._acting, self._prev_cmd = None, None
        if config.action_delay:
            self._acting = 1 - torch.linspace(0, config.action_delay, n, device=dev).view(1, n)
            self._prev_cmd = new(4)
        self._sq9_3d, self._inv_dr, self._inv_tau = self._sq9.view(3, 3, n), new(3), new(1)
        self._inv_mass, self._inv_tau_scale = self._inv_dr[0:1], self._inv_dr[2:3]
        f = self._features = new(F_TASK + self._TASK_FEATURES)
        self._f_norms, self._f_quat2, self._f_crash = f[F_NORMS], f[F_QUAT2], f[F_CRASH]
        self._f_action, self._f_smooth = f[F_ACTION : F_ACTION + 1], f[F_SMOOTH : F_SMOOTH + 1]
        self._obs_buffers = (new(self._obs_dim), new(self._n_priv), new(16))
        self._noise, self._angles, self._cos, self._sin = new(self._NOISE_ROWS), new(3), new(3), new(3)
        c = config
        box = [c.init_pos] * 3 + [c.init_vel] * 3 + [c.init_ang_vel] * 3
        self._box_scale, self._box_bias = col([2 * b for b in box]), col([-b for b in box])
        tilt, yaw = math.radians(c.init_max_tilt_deg), math.radians(c.init_max_yaw_deg)
        # half tilt in [0, tilt/2], azimuth of the tilt axis in [0, 2 pi), half yaw in +-yaw/2
        self._angle_scale, self._angle_bias = col([tilt / 2, 2 * math.pi, yaw]), col([0.0, 0.0, -yaw / 2])
        dr = [c.dr_mass, c.dr_thrust, c.dr_motor_tau]
        self._dr_scale, self._dr_bias = col([2 * r for r in dr]), col([1 - r for r in dr])
        self._limits = col([c.max_pos, c.max_speed, c.max_ang_vel])
        dr_norm = [1 / r if r > 0 else 0.0 for r in dr]
        self._priv_scale = col([2.0] * 4 + dr_norm + [1 / self.max_episode_steps, 1 / self._progress_norm()])
        self._priv_bias = col([-1.0] * 4 + [-x for x in dr_norm] + [0.0, 0.0])
        weights = [0.0, -c.w_vel, -c.w_ang_vel, c.w_tilt, -c.w_tilt, -c.w_tilt, c.w_tilt]  # -w_tilt (1 - R_zz) =
        # the crash penalty comes after the floor (_physics_step) where there is one
        crash = -c.crash_penalty if c.reward_floor is None else 0.0
        weights += [-c.w_action / 4, -c.w_smooth / 4, crash]  # -w_tilt + w_tilt (w2 - x2 - y2 + z2)
        weights = self._task_weights(weights)
        self._weights, self._bias = col(weights).view(1, -1), col([c.alive_bonus - c.w_tilt])
        self._task_bind()
        self.reset()

    # ---- task hooks -------------------------------------------------------------------------
    def _progress_norm(self) -> float:
        """Scale of the PROGRESS row for obs["privileged"]."""
        raise NotImplementedError

    def _progress_max(self) -> float:
        """The largest value the PROGRESS row takes (the bound of obs["privileged"])."""
        raise NotImplementedError

    def _task_weights(self, weights: list[float]) -> list[float]:
        """Complete the reward weights, one per feature row."""
        raise NotImplementedError

    def _task_bind(self) -> None:
        """Create the task's views and scratch (called once, before the first reset)."""

    def _task_update(self, crash: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """After physics: fill task feature rows, advance task state; return (terminated, success) [N]."""
        raise NotImplementedError

    def _task_sample(self, init: torch.Tensor, noise: torch.Tensor) -> None:
        """Fill the task rows of candidates init [rows, k] from uniform noise [_NOISE_ROWS, k]."""

    def _task_observe(self, s: torch.Tensor, obs: torch.Tensor) -> None:
        """Fill the task rows of obs [_OBS_DIM, k] for the envs in s [rows, k]."""

    # ---- contract ---------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        if seed is not None:
            self._gen.manual_seed(seed)
            if self._disturbance is not None:
                self._disturbance.seed(seed)
        self._s.copy_(self._sample(self.num_envs))
        return self._observe(), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        if tuple(action.shape) != (self.num_envs, 4):
            raise ValueError(f"action must be [{self.num_envs}, 4], got {list(action.shape)}")
        if not self._graphed:
            return self._physics_step(action, draw=True)
        self._draw(self.num_envs)  # what the eager step's _sample draws, in the same order
        if self._graph is None:
            self._capture(action)
        self._graph_action.copy_(action)
        self._graph.replay()
        obs, reward, terminated, truncated, info = self._graph_out  # the graph's own memory: copies out
        info = {"final_obs": info["final_obs"].clone(), keys.SUCCESS: info[keys.SUCCESS].clone()}
        return obs.clone(), reward.clone(), terminated.clone(), truncated.clone(), info

    def _capture(self, action: torch.Tensor) -> None:
        """Record one masked step into a CUDA graph reading `_graph_action` and the drawn noise. Capture runs nothing:
        the state is untouched until the first replay."""
        self._graph_action = action.detach().clone()
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # torch's recipe: allocations settle on a side stream before a capture
            saved = self._s.clone()
            self._physics_step(self._graph_action, draw=False)
            self._s.copy_(saved)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._graph_out = self._physics_step(self._graph_action, draw=False)

    def _setpoint(self, a: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """RPM setpoints (fractions of the maximum) [4, N] of actions `a` in [-1, 1], written to `out`.

        Thrust setpoint t + t a + (1 - 2t) relu(a), t = hover thrust / max thrust: linear on each side of 0 with slopes
        t = 0.44 and 1 - t = 0.56; RPM setpoint = its square root. Linear in RPM instead, the slopes would be 0.67 and
        0.33, and zero-mean exploration noise of std 0.5 would shift the mean thrust by ~-20% (here +5%)."""
        t = self.params.hover_fraction**2
        torch.clamp(a, min=0.0, out=self._tmp4)
        return torch.add(a, self._tmp4, alpha=(1 - 2 * t) / t, out=out).mul_(t).add_(t).sqrt_()

    def _physics_step(self, action: torch.Tensor, draw: bool) -> StepResult:
        """The step after the shape check; draw=False: the uniform draws of `_sample` are already in place."""
        a = self._action
        torch.clamp(action.detach().T, -1.0, 1.0, out=a)
        self._setpoint(a, out=self._cmd)
        self._motor_estimate.lerp_(self._cmd, self._estimate_gain)  # on board: the setpoints it sent
        cmd = self._cmd
        if self._acting is not None:  # the previous setpoint (hover after a reset) for the delay, then this one
            cmd = self._setpoint(self._prev_action, out=self._prev_cmd).lerp_(self._cmd, self._acting)
        torch.reciprocal(self._dr, out=self._inv_dr)
        kf, inv_inertia, ext_acc, d = self._kf_scale, None, None, self._disturbance
        if d is not None:  # kicks due now; per-rotor thrust, payload mass and inertia, slower motors, wind
            kf, inv_inertia, ext_acc = d.apply(self._dr, self._inv_dr, self._step_row)
        torch.mul(self._inv_tau_scale, 1 / self.params.motor_time_constant, out=self._inv_tau)
        self.dynamics.step(cmd, kf, self._inv_mass, self._inv_tau, inv_inertia, ext_acc)
        torch.mul(self._motor, self._motor, out=self._sq4)  # specific force = kf w^2 / m, summed over rotors
        if d is None:
            torch.mean(self._sq4, 0, keepdim=True, out=self._specific_force)
            self._specific_force.mul_(self._kf_scale)
        else:
            torch.mean(self._sq4.mul_(kf), 0, keepdim=True, out=self._specific_force)
        self._specific_force.mul_(self._inv_mass).mul_(self._thrust_to_g)
        self._step_row.add_(1)
        terminated, success = self._reward_features()
        reward = torch.addmm(self._bias, self._weights, self._features).view(-1)
        if self.config.reward_floor is not None:
            reward.clamp_(min=self.config.reward_floor).sub_(self._f_crash, alpha=self.config.crash_penalty)
        self._prev_action.copy_(a)
        truncated = (self._step_row >= self.max_episode_steps) & ~terminated
        done = terminated | truncated
        if self._indexed_reset:  # nonzero() syncs with the host: free on CPU
            ids = done.nonzero().squeeze(1)
            finished = self._s.index_select(1, ids)  # the last state of each finished episode
            if ids.numel():
                self._s.index_copy_(1, ids, self._sample(ids.numel()))
            obs = self._observe()
            final_obs = obs.clone()
            if ids.numel():
                final_obs[ids] = self._observe(finished)
        else:  # no sync: candidates for every env, selected where done
            final_obs = self._observe()
            torch.where(done.view(1, -1), self._sample(self.num_envs, draw), self._s, out=self._s)
            obs = self._observe()
        return obs, reward, terminated, truncated, {"final_obs": final_obs, keys.SUCCESS: success}

    def _reward_features(self) -> tuple[torch.Tensor, torch.Tensor]:
        a = self._action
        torch.mul(self._kin, self._kin, out=self._sq9)  # |p|, |v|, |w| from rows 0:9
        torch.sum(self._sq9_3d, 1, out=self._f_norms).sqrt_()
        torch.mul(self._quat, self._quat, out=self._f_quat2)
        torch.mul(a, a, out=self._tmp4)
        torch.sum(self._tmp4, 0, keepdim=True, out=self._f_action)
        torch.sub(a, self._prev_action, out=self._tmp4).square_()
        torch.sum(self._tmp4, 0, keepdim=True, out=self._f_smooth)
        crash = ~(self._f_norms <= self._limits).all(0)  # written as "not within" so that NaN counts as a crash
        self._f_crash.copy_(crash)
        return self._task_update(crash)

    def _draw(self, k: int) -> None:
        """The uniform draws of `_sample(k)`: the env's, then the disturbances' (each from its own generator)."""
        self._noise[:, :k].uniform_(generator=self._gen)
        if self._disturbance is not None:
            self._disturbance.draw(k)

    def _sample(self, k: int, draw: bool = True) -> torch.Tensor:
        """Next-episode candidates for k envs: the first k columns of self._init, [rows, k]; draw=False: from the
        noise `_draw` left."""
        if draw:
            self._draw(k)
        init, u = self._init[:, :k], self._noise[:, :k]
        torch.addcmul(self._box_bias, u[0:9], self._box_scale, out=init[:9])  # p, v, w
        # q = q_tilt (x) q_yaw = (cos a cos c, sin a cos b, sin a sin b, cos a sin c) for half tilt a,
        # half yaw c, and b = azimuth of the tilt axis - c, uniform on the circle like the azimuth.
        angles, cos, sin = self._angles[:, :k], self._cos[:, :k], self._sin[:, :k]
        torch.addcmul(self._angle_bias, u[9:12], self._angle_scale, out=angles)
        torch.cos(angles, out=cos)
        torch.sin(angles, out=sin)
        q = init[QUAT]
        torch.mul(cos[0], cos[2], out=q[0])
        torch.mul(sin[0], cos[1], out=q[1])
        torch.mul(sin[0], sin[1], out=q[2])
        torch.mul(cos[0], sin[2], out=q[3])
        torch.addcmul(self._dr_bias, u[12:15], self._dr_scale, out=init[DR])
        torch.div(init[DR.start + 1], init[DR.start], out=init[SPECIFIC_FORCE])  # hover-speed rotors: kf / m, in g
        self._task_sample(init, u)
        if self._disturbance is not None:
            self._disturbance.sample(init[self._dist_rows])
        return init

    def _observe(self, s: torch.Tensor | None = None) -> TensorDict:
        """Observation of every env, or of the envs in s [rows, k] (then with fresh scratch)."""
        if s is None:
            s, (obs, priv, scratch) = self._s, self._obs_buffers
        else:
            k = s.shape[1]
            obs, priv, scratch = (row_buffer(rows, k, self.device) for rows in (self._obs_dim, self._n_priv, 16))
        torch.sub(s[POS], s[TARGET], out=obs[0:3])
        obs[3:9].copy_(s[VEL.start : ANG_VEL.stop])
        self.dynamics.rotation_matrix(s[QUAT], obs[9:18], scratch)
        obs[18:22].copy_(s[PREV_ACTION])
        self._task_observe(s, obs)
        extra = self._OBS_DIM
        if self.config.obs_motor_estimate:
            torch.addcmul(self._priv_bias[:4], s[MOTOR_ESTIMATE], self._priv_scale[:4], out=obs[extra : extra + 4])
            extra += 4
        if self.config.obs_accelerometer:
            torch.sub(s[SPECIFIC_FORCE], 1.0, out=obs[extra])
        base = priv
        if self._privileged_disturbance:  # rows after the base's; without a preset they stay 0 (zeroed buffers)
            base = priv[:N_PRIVILEGED]
            if self._disturbance is not None:
                self._disturbance.observe(s[self._dist_rows], s[STEP], priv[base.shape[0] :])
        torch.addcmul(self._priv_bias, s[PRIVILEGED], self._priv_scale, out=base)
        fresh = torch.contiguous_format  # always copy: the buffers are overwritten by the next step
        state, priv = obs.T.clone(memory_format=fresh), priv.T.clone(memory_format=fresh)
        return TensorDict({keys.STATE: state, keys.PRIVILEGED: priv}, batch_size=[s.shape[1]])

    # ---- snapshots --------------------------------------------------------------------------
    def _blocks(self) -> dict[str, slice | int]:
        blocks = {"position": POS, "velocity": VEL, "angular_velocity": ANG_VEL, "quaternion": QUAT,
                  "motor_speed": MOTOR, "dr_scale": DR, "step": STEP, "progress": PROGRESS,
                  "target": TARGET, "prev_action": PREV_ACTION, "motor_estimate": MOTOR_ESTIMATE,
                  "specific_force": SPECIFIC_FORCE}  # fmt: skip
        if self._disturbance is not None:
            blocks["disturbance"] = self._dist_rows  # rows: disturbance.py
        return blocks

    def expert_action(self) -> torch.Tensor:
        """The scripted expert's action [N, 4] (sims/quadrotor/scripted.py: a cascaded PD controller): demonstrations
        and `embodied record --operator scripted` act with it."""
        from sims.quadrotor.scripted import controller_action

        state = self._observe()["state"]  # the observation the policy sees (p - target first)
        motor_estimate = self._s[MOTOR_ESTIMATE].T  # rotor-speed fractions predicted from past commands
        return controller_action(state, motor_estimate, self.params)

    def get_state(self) -> dict[str, torch.Tensor]:
        """Named [N, ...] copies of S plus "rng", the generator state. motor_speed is a fraction of max RPM;
        dr_scale holds the multipliers of the nominal mass, thrust coefficient and motor time constant;
        specific_force is the accelerometer's body-z reading in g (an IMU reading overwrites it when deployed)."""
        state = {}
        for name, rows in self._blocks().items():
            block = self._s[rows]
            state[name] = block.long() if name in self._COUNTERS else block.clone() if isinstance(rows, int) else block.T.clone()
        state["rng"] = self._gen.get_state()
        if self._disturbance is not None:
            state["disturbance_rng"] = self._disturbance.get_rng()
        return state

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        expected = set(self._blocks()) | {"rng"} | ({"disturbance_rng"} if self._disturbance is not None else set())
        if set(state) != expected:
            raise KeyError(f"state keys {sorted(state)} differ from {sorted(expected)}")
        for name, rows in self._blocks().items():
            target = self._s[rows]
            value = state[name].to(self.device, torch.float32)
            value = value if isinstance(rows, int) else value.reshape(self.num_envs, -1).T
            if value.shape != target.shape:
                raise ValueError(f"state[{name!r}] has shape {list(state[name].shape)}, not [{self.num_envs}, ...]")
            target.copy_(value)
        self._gen.set_state(state["rng"].cpu())  # a generator state is a CPU byte tensor, even for cuda
        if self._disturbance is not None:
            self._disturbance.set_rng(state["disturbance_rng"])
        return self._observe()


@dataclass(frozen=True)
class HoverConfig(QuadrotorConfig):
    """Hover at the origin (QuadrotorHoverEnv)."""

    success_radius: float = 0.1  # in tolerance: distance to the target below this, m
    success_speed: float = 0.2  # ... and speed below this, m/s
    success_hold_s: float = 1.0  # success: in tolerance at every step of the episode's final this-many seconds

    def __post_init__(self):
        super().__post_init__()
        check(self.success_radius > 0 and self.success_speed > 0, "success_radius and success_speed must be > 0")
        check(self.dt <= self.success_hold_s <= self.episode_s,
              f"success_hold_s={self.success_hold_s} must be in [dt, episode_s={self.episode_s}]")  # fmt: skip


class QuadrotorHoverEnv(_QuadrotorEnv):
    """Fly to the origin from a random state (+-0.5 m, +-0.5 m/s, tilt <= 30 deg, +-1 rad/s) and hold it.

    reward = alive_bonus - w_pos |p - target| - w_vel |v| - w_ang_vel |w| - w_tilt (1 - R_zz)
             - w_action mean(a^2) - w_smooth mean((a - a_prev)^2) - crash_penalty [crash]
    (with reward_floor: max(reward_floor, the terms before the crash penalty) - crash_penalty [crash])
    With the defaults a step is worth ~0.5-1 near the start, ~1 at the target and stays positive
    within ~1.9 m, so surviving pays (like the constant offset in learning-to-fly's rewards); a
    linear (not squared) distance keeps pulling at centimetres. (Against PPO, alive:w_pos = 2:1 hovered
    closer than 3:1 after 8M steps, one seed each; the rest were not tuned.)
    Crash (terminated): |p| > max_pos, speed > max_speed or |w| > max_ang_vel (or NaN).
    Success: within success_radius and below success_speed at every step of the final
    success_hold_s, tracked as a streak of in-tolerance steps; at a step that is not done,
    info["success"] shows whether the streak is already long enough.
    """

    Config = HoverConfig

    def _progress_norm(self) -> float:
        return max(1, round(self.config.success_hold_s / self.config.dt))

    def _progress_max(self) -> float:
        return self.max_episode_steps  # the streak runs on past the hold steps, up to the episode's end

    def _task_weights(self, weights: list[float]) -> list[float]:
        weights[0] = -self.config.w_pos  # the norm |p| is the distance to the target at the origin
        return weights

    def _task_bind(self) -> None:
        self._hold_steps = self._progress_norm()

    def _task_update(self, crash: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f, c = self._features, self.config
        in_tolerance = (f[0] < c.success_radius) & (f[1] < c.success_speed)
        self._progress.add_(1).mul_(in_tolerance)  # the streak restarts at 0 on any drift
        return crash, (self._progress >= self._hold_steps) & ~crash
