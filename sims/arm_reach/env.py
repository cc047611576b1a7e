"""Arm reach with language: touch the ball the instruction names.

    env = ArmReachEnv(ArmReachEnv.Config(), num_envs=4096, device="cuda")
    obs, info = env.reset(seed=0)                    # state [N, 26], privileged [N, 10], language [N, 64]
    obs, reward, terminated, truncated, info = env.step(action)   # action [N, 4] in [-1, 1]

Each episode places a red, a green and a blue ball at reachable positions (the
forward kinematics of random joint configurations within the limits) and picks
one as the goal; `language` says which ("touch the red ball"). Success is the
gripper tip within `success_radius` of the goal for `hold_steps` steps in a row,
which ends the episode (terminated); the time limit truncates it.

Observation `state` (float32, positions divided by the arm's reach so entries
are O(1)):
    [0:4]   joint positions, mapped to [-1, 1] across the joint limits
    [4:8]   joint velocities / max_joint_velocity
    [8:11]  end-effector position / REACH
    [11:20] red, green, blue ball positions / REACH
    [20:23] one-hot of the goal ball            (only with goal_in_state)
    [23:26] goal - end effector, / REACH        (only with goal_in_state)
`privileged` [N, 10]: goal position / REACH, distance / REACH, the goal's joint
configuration mapped to [-1, 1], hold-counter and time fractions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict

from embodied.config import check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.specs import Spec, encode_text, text_spec
from sims.arm_reach import kinematics as kin

COLORS = ("red", "green", "blue")  # ball i always has color i; the goal index varies
TEMPLATES = (
    "touch the {} ball",
    "reach the {} ball",
    "move the gripper to the {} ball",
    "go to the {} ball",
)
PRIVILEGED_DIM = 10
CANDIDATES = 16  # joint configurations drawn per ball per rejection round


@dataclass(frozen=True)
class ArmReachConfig:
    """Task, control and reward settings of `ArmReachEnv`."""

    control: Literal["velocity", "torque"] = "velocity"  # what the action commands, see ArmReachEnv._integrate
    # rad/s at action 1: under a third of the SO-101's STS3215 servo's rated no-load speed
    # (0.22 s/60 deg = 4.8 rad/s, Feetech datasheet), leaving headroom under load
    max_joint_velocity: float = 1.5
    control_dt: float = 0.05  # s per step (20 Hz): a joint moves at most 0.075 rad per step
    max_episode_steps: int = 100  # steps before truncation (5 s; the longest joint move takes ~2.6 s)
    success_radius: float = 0.05  # m, gripper tip to goal-ball centre
    hold_steps: int = 5  # consecutive steps within success_radius that count as success
    goal_in_state: bool = True  # False: the goal is named only by `language`
    # the instruction names the ball this many colors after the goal (red -> green -> blue -> red): 0 = the goal's
    # own (training); 1 or 2 = another ball's, for evaluation only: a policy that follows the words goes to the
    # named ball and fails, one that ignores them succeeds as often as with the true words
    language_shift: int = 0
    distance_weight: float = 1.0  # reward per step per metre of tip-to-goal distance (negative)
    success_bonus: float = 10.0  # reward on the step that succeeds
    action_weight: float = 0.01  # reward per step per unit of squared action norm (negative)
    init_noise: float = 0.1  # rad, uniform noise on the home pose at reset
    min_ball_height: float = 0.03  # m, ball centres at least this far above the table
    max_ball_height: float = 0.30  # m, and at most this far: a tabletop workspace, not the sky above the arm
    min_ball_radius: float = 0.12  # m, ball centres at least this far from the yaw axis
    min_ball_separation: float = 0.10  # m, between ball centres (two success radii)
    min_start_distance: float = 0.10  # m, between the start tip position and every ball
    max_instruction_bytes: int = 64  # width of the `language` byte tensor
    inertia: float = 0.02  # kg m^2 per joint, torque control only (illustrative)
    damping: float = 0.2  # N m s/rad per joint, torque control only (illustrative)
    max_torque: float = 0.3  # N m at action 1, torque control only; max_torque / damping = 1.5 rad/s top speed

    def __post_init__(self):
        check(self.control in ("velocity", "torque"), f"control={self.control!r} must be 'velocity' or 'torque'")
        for name in ("max_joint_velocity", "control_dt", "success_radius", "inertia", "damping", "max_torque"):
            check(getattr(self, name) > 0, f"{name}={getattr(self, name)} must be > 0")
        check(self.max_episode_steps > 0, f"max_episode_steps={self.max_episode_steps} must be > 0")
        check(self.hold_steps >= 1, f"hold_steps={self.hold_steps} must be >= 1")
        check(0 <= self.language_shift < len(COLORS), f"language_shift={self.language_shift} must be 0, 1 or 2")
        check(self.hold_steps < self.max_episode_steps, "hold_steps must be < max_episode_steps")
        for name in ("distance_weight", "success_bonus", "action_weight", "init_noise", "min_ball_height"):
            check(getattr(self, name) >= 0, f"{name}={getattr(self, name)} must be >= 0")
        # tight placement constraints would make rejection sampling loop forever
        check(0 <= self.min_ball_radius < 0.6 * kin.REACH, f"min_ball_radius must be in [0, {0.6 * kin.REACH:.3f}) m")
        check(
            self.min_ball_height + 0.05 <= self.max_ball_height, "max_ball_height must be >= min_ball_height + 0.05 m"
        )
        check(0 <= self.min_ball_separation <= 0.2, "min_ball_separation must be in [0, 0.2] m")
        check(0 <= self.min_start_distance <= 0.2, "min_start_distance must be in [0, 0.2] m")
        longest = max(len(t.format(c).encode()) for t in TEMPLATES for c in COLORS)
        check(self.max_instruction_bytes >= longest, f"max_instruction_bytes must be >= {longest}")


class ArmReachEnv(VecEnv):
    """N independent SO-101-like arms, each reaching for the ball its instruction names."""

    fork_safe = True  # pure torch: train.collect_ahead forks a worker that steps it

    Config = ArmReachConfig
    # per-env tensors that make up a snapshot, with the generator (get_state / set_state)
    _state_names = ("qpos", "qvel", "ball_qpos", "ball_pos", "goal", "template", "hold", "steps")
    # the snapshot entries the policy's observation is made from that a robot (or its perception) supplies; deploy
    # checks that the robot's observations of these names mean the same
    snapshot_meaning = {"qpos": "rad, arm_reach joints (0 = stretched along +x)", "qvel": "rad/s, arm_reach joints",
                        "ball_pos": "m, arm base z-up; red, green, blue",
                        "goal": "index of the goal ball: red, green, blue",
                        "template": "index of the instruction template"}  # fmt: skip

    def __init__(self, config: ArmReachConfig, num_envs: int = 1, device: torch.device | str = "cpu"):
        check(num_envs >= 1, f"num_envs={num_envs} must be >= 1")
        self.config, self.num_envs = config, num_envs
        self.device = resolve_device(str(device))
        self.max_episode_steps = config.max_episode_steps
        n, j, dev = num_envs, kin.NUM_JOINTS, self.device
        self.lower = torch.tensor(kin.JOINT_LOWER, device=dev)
        self.upper = torch.tensor(kin.JOINT_UPPER, device=dev)
        self.home = torch.tensor(kin.HOME_QPOS, device=dev)
        # every (template, color) instruction encoded once; row = template * 3 + color
        texts = [t.format(c) for t in TEMPLATES for c in COLORS]
        self.instructions = encode_text(texts, config.max_instruction_bytes, dev)  # [T * 3, L]
        # the env's own generator: reset(seed) makes every episode reproducible;
        # until then it follows the global torch seed
        self.generator = torch.Generator(device=dev)
        self.generator.manual_seed(int(torch.randint(0, 2**62, ())))
        # per-env state, all restored by set_state
        self.qpos = self.home.expand(n, j).clone()  # [N, J] rad
        self.qvel = torch.zeros(n, j, device=dev)  # [N, J] rad/s
        self.ball_qpos = torch.zeros(n, len(COLORS), j, device=dev)  # [N, 3, J] a configuration touching each ball
        self.ball_pos = torch.zeros(n, len(COLORS), 3, device=dev)  # [N, 3, 3] m
        self.goal = torch.zeros(n, dtype=torch.long, device=dev)  # [N] index into COLORS
        self.template = torch.zeros(n, dtype=torch.long, device=dev)  # [N] index into TEMPLATES
        self.hold = torch.zeros(n, dtype=torch.long, device=dev)  # [N] consecutive steps within success_radius
        self.steps = torch.zeros(n, dtype=torch.long, device=dev)  # [N] steps in the current episode

        state_dim = 2 * j + 3 + 3 * len(COLORS) + (len(COLORS) + 3 if config.goal_in_state else 0)
        # Bounds: every point of the arm (tip, balls) lies within REACH of the shoulder-height point above the
        # base, so a position / REACH is within [-1, 1.34] per axis and a difference or distance of two at most
        # 2 (approached by two points stretched out at yaw +-90 deg); joint values and fractions are in [-1, 1];
        # joint velocities stay within max_joint_velocity, under torque control within max_torque / damping
        # (the damped integration's fixed point). 1% leaves room for float rounding at the edges.
        top_speed = config.max_torque / config.damping if config.control == "torque" else config.max_joint_velocity
        bound = 1.01 * max(2.0, top_speed / config.max_joint_velocity)
        self.observation_spec = {
            "state": Spec((state_dim,), torch.float32, -bound, bound),
            "privileged": Spec((PRIVILEGED_DIM,), torch.float32, -2.02, 2.02),
            "language": text_spec(config.max_instruction_bytes),
        }
        self.action_spec = Spec((j,), torch.float32, -1.0, 1.0, meaning="joint velocity / max_joint_velocity")

    # --- the VecEnv verbs -------------------------------------------------

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        """Start a new episode in every env; `seed` re-seeds the generator."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self._reset_envs(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self._observe(), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        """Advance every env by control_dt; action [N, J] is clipped to [-1, 1]."""
        cfg = self.config
        if tuple(action.shape) != (self.num_envs, kin.NUM_JOINTS):
            raise ValueError(f"action shape {tuple(action.shape)} != ({self.num_envs}, {kin.NUM_JOINTS})")
        action = action.to(self.device, torch.float32).clamp(-1.0, 1.0)
        self._integrate(action)

        distance = (kin.forward_kinematics(self.qpos) - self.goal_position).norm(dim=-1)
        self.hold = torch.where(distance <= cfg.success_radius, self.hold + 1, 0)
        self.steps += 1
        success = self.hold >= cfg.hold_steps
        terminated = success.clone()
        truncated = (self.steps >= cfg.max_episode_steps) & ~terminated
        reward = (
            -cfg.distance_weight * distance
            - cfg.action_weight * action.square().sum(-1)
            + cfg.success_bonus * success.float()
        )

        obs = self._observe()
        info = {"success": success, "final_obs": obs.clone()}
        done = terminated | truncated
        if bool(done.any()):  # the one host sync of a step without resets
            self._reset_envs(done)
            obs = self._observe()
        return obs, reward, terminated, truncated, info

    def expert_action(self) -> torch.Tensor:
        """The scripted expert's action [N, A] (sims/arm_reach/scripted.py): demonstrations, `embodied record
        --operator scripted` and the scripted correction operator act with it."""
        from sims.arm_reach.scripted import scripted_action

        return scripted_action(self)

    def task_progress(self, obs) -> tuple[torch.Tensor, torch.Tensor]:
        """(distance still to go [N] m, fraction of the time limit used [N]): the end effector to the goal, from
        the `privileged` observation (layout above: [3] distance / REACH, [9] step fraction)."""
        privileged = obs["privileged"]
        return privileged[:, 3] * kin.REACH, privileged[:, 9]

    def get_state(self) -> dict[str, torch.Tensor]:
        """A copy of every env's state and of the generator."""
        state = {name: getattr(self, name).clone() for name in self._state_names}
        state["generator"] = self.generator.get_state()
        return state

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        """Restore a `get_state` snapshot; stepping afterwards repeats bit for bit."""
        missing = {*self._state_names, "generator"} - set(state)
        if missing:
            raise KeyError(f"snapshot lacks {sorted(missing)}")
        for name in self._state_names:
            current = getattr(self, name)
            if state[name].shape != current.shape:
                raise ValueError(
                    f"snapshot {name} has shape {tuple(state[name].shape)}, env has {tuple(current.shape)}"
                )
            current.copy_(state[name])
        self.generator.set_state(state["generator"].cpu())  # a checkpoint may have moved it to the env device
        return self._observe()

    # --- task quantities (also read by scripted_action) --------------------

    @property
    def goal_position(self) -> torch.Tensor:
        """[N, 3] m, centre of each env's goal ball."""
        return self.ball_pos[torch.arange(self.num_envs, device=self.device), self.goal]

    @property
    def goal_qpos(self) -> torch.Tensor:
        """[N, J] rad, a joint configuration (within limits) whose tip is at the goal."""
        return self.ball_qpos[torch.arange(self.num_envs, device=self.device), self.goal]

    @property
    def ee_position(self) -> torch.Tensor:
        """[N, 3] m, gripper tip."""
        return kin.forward_kinematics(self.qpos)

    # --- internals -------------------------------------------------------

    def _integrate(self, action: torch.Tensor) -> None:
        """Advance the joints by one control step; a joint stops at its limit.

        velocity: an ideal velocity servo (like a position-controlled hobby servo
        fed small steps): q += a * max_joint_velocity * dt.
        torque: decoupled joints, inertia * qdd = a * max_torque - damping * qd,
        gravity-free; damping is integrated implicitly so any dt is stable.
        """
        cfg, dt = self.config, self.config.control_dt
        if cfg.control == "velocity":
            qvel = action * cfg.max_joint_velocity
        else:
            qvel = (self.qvel + dt * action * cfg.max_torque / cfg.inertia) / (1.0 + dt * cfg.damping / cfg.inertia)
        qpos = torch.minimum(torch.maximum(self.qpos + dt * qvel, self.lower), self.upper)
        self.qvel = (qpos - self.qpos) / dt  # the velocity actually achieved, zero into a limit
        self.qpos = qpos

    def _observe(self) -> TensorDict:
        n, cfg = self.num_envs, self.config
        ee = kin.forward_kinematics(self.qpos)
        goal_pos = self.goal_position
        parts = [
            self._normalize_qpos(self.qpos),
            self.qvel / cfg.max_joint_velocity,
            ee / kin.REACH,
            self.ball_pos.reshape(n, -1) / kin.REACH,
        ]
        if cfg.goal_in_state:
            one_hot = torch.nn.functional.one_hot(self.goal, len(COLORS)).float()
            parts += [one_hot, (goal_pos - ee) / kin.REACH]
        distance = (goal_pos - ee).norm(dim=-1, keepdim=True)
        privileged = [
            goal_pos / kin.REACH,
            distance / kin.REACH,
            self._normalize_qpos(self.goal_qpos),
            (self.hold.float() / cfg.hold_steps).unsqueeze(-1),
            (self.steps.float() / cfg.max_episode_steps).unsqueeze(-1),
        ]
        named = (self.goal + cfg.language_shift) % len(COLORS)
        language = self.instructions[self.template * len(COLORS) + named]
        return TensorDict(
            {"state": torch.cat(parts, -1), "privileged": torch.cat(privileged, -1), "language": language},
            batch_size=[n],
            device=self.device,
        )

    def _normalize_qpos(self, qpos: torch.Tensor) -> torch.Tensor:
        return 2.0 * (qpos - self.lower) / (self.upper - self.lower) - 1.0

    def _rand(self, *shape: int) -> torch.Tensor:
        return torch.rand(shape, generator=self.generator, device=self.device)

    def _reset_envs(self, mask: torch.Tensor) -> None:
        """New episode for the envs where mask [N] is True: pose, balls, goal, wording."""
        idx = mask.nonzero().squeeze(-1)
        m, j = idx.numel(), kin.NUM_JOINTS
        noise = self.config.init_noise * (2.0 * self._rand(m, j) - 1.0)
        qpos = torch.minimum(torch.maximum(self.home + noise, self.lower), self.upper)
        ball_qpos, ball_pos = self._sample_balls(kin.forward_kinematics(qpos))
        self.qpos[idx], self.qvel[idx] = qpos, 0.0
        self.ball_qpos[idx], self.ball_pos[idx] = ball_qpos, ball_pos
        self.goal[idx] = torch.randint(len(COLORS), (m,), generator=self.generator, device=self.device)
        self.template[idx] = torch.randint(len(TEMPLATES), (m,), generator=self.generator, device=self.device)
        self.hold[idx], self.steps[idx] = 0, 0

    def _sample_balls(self, start_ee: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reachable ball placements for M envs, start_ee [M, 3] -> (qpos [M, 3, J], pos [M, 3, 3]).

        Each ball is the tip of a uniformly drawn joint configuration, so a
        configuration reaching it exists by construction; candidates too low or
        high, too close to the yaw axis, to the start or to an earlier ball are
        rejected. Rejection rounds loop over the few unlucky envs, never over all.
        """
        cfg, m, j = self.config, start_ee.shape[0], kin.NUM_JOINTS
        ball_qpos = torch.zeros(m, len(COLORS), j, device=self.device)
        ball_pos = torch.zeros(m, len(COLORS), 3, device=self.device)
        for ball in range(len(COLORS)):
            todo = torch.arange(m, device=self.device)
            while todo.numel() > 0:
                q = self.lower + (self.upper - self.lower) * self._rand(todo.numel(), CANDIDATES, j)
                p = kin.forward_kinematics(q)  # [m', K, 3]
                ok = (p[..., 2] >= cfg.min_ball_height) & (p[..., 2] <= cfg.max_ball_height)
                ok &= p[..., :2].norm(dim=-1) >= cfg.min_ball_radius
                ok &= (p - start_ee[todo, None]).norm(dim=-1) >= cfg.min_start_distance
                for earlier in range(ball):
                    ok &= (p - ball_pos[todo, earlier, None]).norm(dim=-1) >= cfg.min_ball_separation
                found = ok.any(dim=1)
                first = ok.int().argmax(dim=1)  # index of the first accepted candidate
                rows = torch.arange(todo.numel(), device=self.device)[found]
                ball_qpos[todo[found], ball] = q[rows, first[found]]
                ball_pos[todo[found], ball] = p[rows, first[found]]
                todo = todo[~found]
        return ball_qpos, ball_pos
