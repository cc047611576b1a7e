"""FAKE Isaac Lab: `FakeDirectRLEnv` and `FakeManagerBasedRLEnv` reproduce Isaac Lab 2.x's RL env APIs.

What is reproduced exactly (isaaclab/envs/direct_rl_env.py and
manager_based_rl_env.py, Isaac Lab 2.x):

- `gymnasium.Env` subclasses with `num_envs`, `device` (a string such as
  "cuda:0"), `max_episode_length` (= ceil(episode_length_s / (dt *
  decimation))), `step_dt`, `episode_length_buf`, `reset_buf`,
  `reset_terminated`, `reset_time_outs`, `extras`, `single_observation_space`
  (a Dict with "policy" and, for asymmetric tasks, "critic"),
  `single_action_space` (unbounded Box), batched `observation_space` / `action_space`;
- `reset(seed=None, options=None) -> (obs, extras)`: seeds the global
  generators (`seed()` is a static method), calls `_reset_idx` on every env and
  returns freshly computed observations;
- `step(action) -> (obs, reward, terminated, time_outs, extras)` in Isaac Lab's
  order: pre-physics, `decimation` physics steps, `episode_length_buf += 1`,
  dones, rewards, then `_reset_idx(finished)` INSIDE step, then observations.
  So the obs returned for a finished env is already the new episode's first,
  and the last observation of the finished episode is never returned;
  `terminated` and `time_outs` may both be True for one env.

`FakeCartpoleDirectEnv` follows isaaclab_tasks/direct/cartpole/cartpole_env.py
(observation [pole pos, pole vel, cart pos, cart vel], reset distribution,
rewards, dones: time out at `max_episode_length - 1`); `FakeCartpoleManagerBasedEnv`
follows the manager-based cartpole (observation group "policy" [joint pos,
joint vel], time out at `max_episode_length` as `mdp.time_out`), with a
"critic" group. Physics is `embodied.testing.cartpole`, not PhysX. These are
fakes for tests: no Isaac Sim app, scene, sensors, events or recorders.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
import torch

from embodied.testing.cartpole import cartpole_step


@dataclass
class FakeEnvCfg:
    """The few `DirectRLEnvCfg` / `ManagerBasedRLEnvCfg` fields the fakes read (values of the cartpole cfgs)."""

    num_envs: int = 16  # scene.num_envs
    device: str = "cpu"  # sim.device
    dt: float = 1 / 120  # sim.dt, s
    decimation: int = 2
    episode_length_s: float = 5.0
    action_scale: float = 100.0  # N at action 1 (cartpole_env.py)
    max_cart_pos: float = 3.0  # m
    initial_pole_angle_range: list = field(default_factory=lambda: [-0.25, 0.25])  # x pi rad
    asymmetric: bool = False  # add a "critic" observation (the state_space of asymmetric tasks)


class _FakeRLEnvBase(gymnasium.Env):
    """Buffers, spaces and cart-pole physics shared by both fakes."""

    is_vector_env = True
    metadata = {"render_modes": [None], "isaac_sim_version": "fake"}
    obs_dim = 4

    def __init__(self, cfg: FakeEnvCfg, render_mode: str | None = None, **kwargs):
        self.cfg, self.render_mode = cfg, render_mode
        self.device = cfg.device
        n = self.num_envs
        self.episode_length_buf = torch.zeros(n, device=self.device, dtype=torch.long)
        self.reset_terminated = torch.zeros(n, device=self.device, dtype=torch.bool)
        self.reset_time_outs = torch.zeros_like(self.reset_terminated)
        self.reset_buf = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.common_step_counter = 0
        self._sim_step_counter = 0
        self.extras: dict[str, Any] = {}
        self.single_observation_space = gymnasium.spaces.Dict()
        self.single_observation_space["policy"] = gymnasium.spaces.Box(-np.inf, np.inf, (self.obs_dim,))
        if cfg.asymmetric:
            self.single_observation_space["critic"] = gymnasium.spaces.Box(-np.inf, np.inf, (self.obs_dim + 1,))
        self.single_action_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,))
        self.observation_space = gymnasium.vector.utils.batch_space(self.single_observation_space["policy"], n)
        self.action_space = gymnasium.vector.utils.batch_space(self.single_action_space, n)
        self.joint_pos = torch.zeros(n, 2, device=self.device)  # [cart, pole]
        self.joint_vel = torch.zeros(n, 2, device=self.device)
        self.actions = torch.zeros(n, 1, device=self.device)

    @property
    def num_envs(self) -> int:
        return self.cfg.num_envs

    @property
    def physics_dt(self) -> float:
        return self.cfg.dt

    @property
    def step_dt(self) -> float:
        return self.cfg.dt * self.cfg.decimation

    @property
    def max_episode_length_s(self) -> float:
        return self.cfg.episode_length_s

    @property
    def max_episode_length(self) -> int:
        return math.ceil(self.max_episode_length_s / self.step_dt)

    @staticmethod
    def seed(seed: int = -1) -> int:
        """As Isaac Lab's configure_seed: seeds random, numpy and torch globally."""
        if seed == -1:
            seed = np.random.randint(0, 10_000)
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        return seed

    def close(self) -> None:
        pass

    # --- cart-pole physics standing in for the scene -------------------------

    def _physics_step(self) -> None:
        force = self.actions[:, 0] * self.cfg.action_scale
        out = cartpole_step(self.joint_pos[:, 0], self.joint_vel[:, 0], self.joint_pos[:, 1], self.joint_vel[:, 1],
                            force, self.physics_dt)
        self.joint_pos = torch.stack((out[0], out[2]), -1)
        self.joint_vel = torch.stack((out[1], out[3]), -1)

    def _reset_joints(self, env_ids: torch.Tensor) -> None:
        low, high = self.cfg.initial_pole_angle_range
        angle = (low + (high - low) * torch.rand(len(env_ids), device=self.device)) * math.pi  # sample_uniform
        self.joint_pos[env_ids.long()] = torch.stack((torch.zeros_like(angle), angle), -1)
        self.joint_vel[env_ids.long()] = 0.0

    def _out_of_bounds(self) -> torch.Tensor:
        return (self.joint_pos[:, 0].abs() > self.cfg.max_cart_pos) | (self.joint_pos[:, 1].abs() > math.pi / 2)

    def _critic(self, policy: torch.Tensor) -> torch.Tensor:
        progress = self.episode_length_buf.float().unsqueeze(-1) / self.max_episode_length
        return torch.cat((policy, progress), -1)


class FakeDirectRLEnv(_FakeRLEnvBase):
    """FAKE of `isaaclab.envs.DirectRLEnv`: reset/step in its order; tasks implement the `_*` hooks."""

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.seed(seed)
        indices = torch.arange(self.num_envs, dtype=torch.int32, device=self.device)
        self._reset_idx(indices)
        return self._get_observations(), self.extras

    def step(self, action: torch.Tensor) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        action = action.to(self.device)
        self._pre_physics_step(action)
        for _ in range(self.cfg.decimation):
            self._sim_step_counter += 1
            self._apply_action()
            self._physics_step()
        self.episode_length_buf += 1
        self.common_step_counter += 1
        self.reset_terminated[:], self.reset_time_outs[:] = self._get_dones()
        self.reset_buf = self.reset_terminated | self.reset_time_outs
        self.reward_buf = self._get_rewards()
        reset_env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1).int()
        if len(reset_env_ids) > 0:
            self._reset_idx(reset_env_ids)
        self.obs_buf = self._get_observations()
        return self.obs_buf, self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        self.episode_length_buf[env_ids.long()] = 0

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        raise NotImplementedError

    def _apply_action(self) -> None:
        raise NotImplementedError

    def _get_observations(self) -> dict:
        raise NotImplementedError

    def _get_rewards(self) -> torch.Tensor:
        raise NotImplementedError

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class FakeCartpoleDirectEnv(FakeDirectRLEnv):
    """FAKE of Isaac Lab's direct `CartpoleEnv` (Isaac-Cartpole-Direct-v0)."""

    def _pre_physics_step(self, actions: torch.Tensor) -> None:
        self.actions = actions.clone()

    def _apply_action(self) -> None:
        pass  # the fake physics reads self.actions

    def _get_observations(self) -> dict:
        pos, vel = self.joint_pos, self.joint_vel
        policy = torch.stack((pos[:, 1], vel[:, 1], pos[:, 0], vel[:, 0]), -1)
        obs = {"policy": policy}
        if self.cfg.asymmetric:
            obs["critic"] = self._critic(policy)
        return obs

    def _get_rewards(self) -> torch.Tensor:
        terminated = self.reset_terminated.float()
        return (
            1.0 * (1.0 - terminated) - 2.0 * terminated - self.joint_pos[:, 1].square()
            - 0.01 * self.joint_vel[:, 0].abs() - 0.005 * self.joint_vel[:, 1].abs()
        )

    def _get_dones(self) -> tuple[torch.Tensor, torch.Tensor]:
        time_out = self.episode_length_buf >= self.max_episode_length - 1
        return self._out_of_bounds(), time_out

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        super()._reset_idx(env_ids)
        self._reset_joints(env_ids)


class _FakeObservationManager:
    """FAKE of `ObservationManager`: `compute()` returns every group's concatenated terms."""

    def __init__(self, env: FakeManagerBasedRLEnv):
        self._env = env
        self.group_obs_dim = {name: space.shape for name, space in env.single_observation_space.items()}

    def compute(self, update_history: bool = False) -> dict[str, torch.Tensor]:
        env = self._env
        policy = torch.cat((env.joint_pos, env.joint_vel), -1)  # mdp.joint_pos_rel, mdp.joint_vel_rel
        out = {"policy": policy}
        if env.cfg.asymmetric:
            out["critic"] = env._critic(policy)
        return out


class _FakeTerminationManager:
    """FAKE of `TerminationManager` with cartpole's terms: time_out and cart_out_of_bounds."""

    def __init__(self, env: FakeManagerBasedRLEnv):
        self._env = env
        self._terms: dict[str, torch.Tensor] = {}

    def compute(self) -> torch.Tensor:
        env = self._env
        self._terms = {
            "time_out": env.episode_length_buf >= env.max_episode_length,  # mdp.time_out
            "cart_out_of_bounds": env._out_of_bounds(),
        }
        return self.terminated | self.time_outs

    @property
    def active_terms(self) -> list[str]:
        return ["time_out", "cart_out_of_bounds"]

    @property
    def time_outs(self) -> torch.Tensor:
        return self._terms["time_out"]

    @property
    def terminated(self) -> torch.Tensor:
        return self._terms["cart_out_of_bounds"]

    def get_term(self, name: str) -> torch.Tensor:
        return self._terms[name]


class FakeManagerBasedRLEnv(_FakeRLEnvBase):
    """FAKE of `isaaclab.envs.ManagerBasedRLEnv` (the cartpole task's managers built in)."""

    def __init__(self, cfg: FakeEnvCfg, render_mode: str | None = None, **kwargs):
        super().__init__(cfg, render_mode, **kwargs)
        self.observation_manager = _FakeObservationManager(self)
        self.termination_manager = _FakeTerminationManager(self)

    def reset(self, seed: int | None = None, env_ids: torch.Tensor | None = None, options: dict | None = None):
        if env_ids is None:
            env_ids = torch.arange(self.num_envs, dtype=torch.int64, device=self.device)
        if seed is not None:
            self.seed(seed)
        self._reset_idx(env_ids)
        self.obs_buf = self.observation_manager.compute(update_history=True)
        return self.obs_buf, self.extras

    def step(self, action: torch.Tensor):
        self.actions = action.to(self.device).clone()  # action_manager.process_action
        for _ in range(self.cfg.decimation):
            self._sim_step_counter += 1
            self._physics_step()  # action_manager.apply_action, sim.step, scene.update
        self.episode_length_buf += 1
        self.common_step_counter += 1
        self.reset_buf = self.termination_manager.compute()
        self.reset_terminated = self.termination_manager.terminated
        self.reset_time_outs = self.termination_manager.time_outs
        self.reward_buf = self._reward() * self.step_dt  # reward_manager.compute(dt=step_dt) scales by dt
        reset_env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(reset_env_ids) > 0:
            self._reset_idx(reset_env_ids)
        self.obs_buf = self.observation_manager.compute(update_history=True)
        return self.obs_buf, self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        self._reset_joints(env_ids)
        self.episode_length_buf[env_ids.long()] = 0

    def _reward(self) -> torch.Tensor:
        """cartpole_env_cfg.py's RewardsCfg: alive 1, terminating -2, pole upright -1, velocities -0.01/-0.005."""
        terminated = self.reset_terminated.float()
        return (
            1.0 * (1.0 - terminated) - 2.0 * terminated - self.joint_pos[:, 1].square()
            - 0.01 * self.joint_vel[:, 0].abs() - 0.005 * self.joint_vel[:, 1].abs()
        )


FakeCartpoleManagerBasedEnv = FakeManagerBasedRLEnv
