"""Isaac Lab tasks (`DirectRLEnv` / `ManagerBasedRLEnv`) behind the VecEnv contract.

    env = IsaacLabEnv(IsaacLabEnv.Config(task="Isaac-Cartpole-Direct-v0"), num_envs=4096, device="cuda:0")
    env = IsaacLabEnv.from_env(gym_env)          # or wrap an Isaac Lab env you built yourself
    obs, info = env.reset(seed=0)                      # state = obs["policy"], privileged = obs["critic"]
    obs, reward, terminated, truncated, info = env.step(action)

Isaac Lab's `step(action)` returns `(obs, reward, terminated, time_outs,
extras)`; a step can report both flags for one env, which the contract counts
as terminated only (`truncated = time_outs & ~terminated`). Tensors stay on
the env's device, uncopied.

Auto-reset: Isaac Lab resets finished envs INSIDE `step` (after rewards,
before observations), so the returned obs is already the next episode's first:
the same-step mode of our contract. The finished episode's last observation is
never returned by Isaac Lab; with `final_obs="capture"` (the default) the
adapter computes it just before Isaac Lab's `_reset_idx` runs, with the env's
own observation function (`_get_observations()` of a DirectRLEnv,
`observation_manager.compute()` of a ManagerBasedRLEnv), by wrapping that
instance's `_reset_idx`. This costs one extra observation computation on steps
where an episode ends; the captured obs carries no observation noise. With
`final_obs="post_reset"` nothing is wrapped and `info["final_obs"]` rows of
finished envs hold the post-reset observation (Isaac Lab's own behaviour: value
bootstrapping at a time limit is then approximate).

Seeding: `reset(seed)` calls Isaac Lab's `reset(seed=...)`, which seeds torch,
numpy and random globally. Snapshots are not offered.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.registry import MissingExtraError
from embodied.specs import Spec, encode_text, text_spec


@dataclass(frozen=True)
class IsaacLabConfig:
    """Which Isaac Lab task to build (ignored when wrapping an env with `from_env`) and how to map it."""

    task: str = "Isaac-Cartpole-Direct-v0"  # a registered Isaac Lab task id
    final_obs: Literal["capture", "post_reset"] = "capture"  # see the module docstring
    clip_actions: float = 0.0  # > 0: clip actions to [-c, c] (as Isaac Lab's rsl_rl wrapper); 0 = pass through
    success_term: str = ""  # a ManagerBasedRLEnv termination term that means success; "" = none
    instruction: str = ""  # a language instruction attached to every env; "" = no language field
    max_instruction_bytes: int = 64  # width of the `language` byte tensor

    def __post_init__(self):
        check(bool(self.task), "task must name an Isaac Lab task, e.g. 'Isaac-Cartpole-Direct-v0'")
        check(self.clip_actions >= 0, f"clip_actions={self.clip_actions} must be >= 0")
        check(len(self.instruction.encode()) <= self.max_instruction_bytes, "instruction exceeds max_instruction_bytes")


class IsaacLabEnv(VecEnv):
    """An Isaac Lab RL env as a VecEnv (same-step autoreset, final obs captured before the reset)."""

    Config = IsaacLabConfig
    # Direct tasks conventionally time out at max_episode_length - 1 (e.g. the
    # cartpole's _get_dones), manager-based ones at max_episode_length (mdp.time_out)
    time_limit_slack = 1

    def __init__(self, config: IsaacLabConfig, num_envs: int = 1, device: torch.device | str = "cuda:0", env=None):
        self.config = config
        self.isaac_env = env if env is not None else _make_env(config, num_envs, str(device))
        base = self.isaac_env.unwrapped
        self.base = base
        self.num_envs = int(base.num_envs)
        self.device = resolve_device(str(base.device))
        self.max_episode_steps = int(base.max_episode_length)
        spaces = base.single_observation_space
        self.observation_spec = {keys.STATE: Spec((_flat_dim(spaces["policy"]),), torch.float32)}
        if "critic" in spaces.spaces:
            self.observation_spec[keys.PRIVILEGED] = Spec((_flat_dim(spaces["critic"]),), torch.float32)
        if config.instruction:
            self.observation_spec[keys.LANGUAGE] = text_spec(config.max_instruction_bytes)
            text = encode_text([config.instruction], config.max_instruction_bytes, self.device)
            self._language = text.expand(self.num_envs, -1)
        act = base.single_action_space
        low, high = np.asarray(act.low, np.float64), np.asarray(act.high, np.float64)
        if config.clip_actions > 0:
            bounds = (-config.clip_actions, config.clip_actions)
        elif np.isfinite(low).all() and np.isfinite(high).all():
            bounds = (float(low.min()), float(high.max()))
        else:  # Isaac Lab's direct tasks declare unbounded actions
            bounds = (None, None)
        self.action_spec = Spec(tuple(act.shape), torch.float32, *bounds)
        self._in_step, self._captured = False, None
        if config.final_obs == "capture":
            self._wrap_reset_idx()

    @classmethod
    def from_env(cls, env, config: IsaacLabConfig | None = None) -> IsaacLabEnv:
        """Wrap an already built Isaac Lab env (from gym.make, your own class, or a fake)."""
        return cls(config or IsaacLabConfig(), env=env)

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        obs, _ = self.isaac_env.reset(seed=seed)
        return self._observe(obs), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        if tuple(action.shape) != (self.num_envs, *self.action_spec.shape):
            raise ValueError(f"action shape {tuple(action.shape)} != {(self.num_envs, *self.action_spec.shape)}")
        if self.config.clip_actions > 0:
            action = action.clamp(-self.config.clip_actions, self.config.clip_actions)
        self._in_step, self._captured = True, None
        try:
            obs, reward, terminated, time_outs, _ = self.isaac_env.step(action.to(self.device))
        finally:
            self._in_step = False
        terminated = terminated.to(self.device).bool()
        truncated = time_outs.to(self.device).bool() & ~terminated
        obs = self._observe(obs)
        final = obs
        if self._captured is not None:  # rows of envs Isaac Lab just reset, from before the reset
            env_ids, before = self._captured
            final = obs.clone()
            final[env_ids] = self._observe(before)[env_ids]
        if self.config.success_term:
            success = self.base.termination_manager.get_term(self.config.success_term).bool()
        else:
            success = torch.zeros_like(terminated)
        info = {keys.SUCCESS: success, "final_obs": final}
        return obs, reward.to(self.device, torch.float32), terminated, truncated, info

    def close(self) -> None:
        self.isaac_env.close()

    # --- internals -------------------------------------------------------

    def _wrap_reset_idx(self) -> None:
        """Shadow the instance's `_reset_idx` so a reset inside `step` first records the observation."""
        base, original = self.base, self.base._reset_idx

        def _reset_idx(env_ids, *args, **kwargs):
            if self._in_step:
                ids = torch.as_tensor(env_ids, device=self.device).long()
                self._captured = (ids, _clone(self._compute_obs()))
            return original(env_ids, *args, **kwargs)

        base._reset_idx = _reset_idx

    def _compute_obs(self) -> dict:
        if hasattr(self.base, "observation_manager"):  # ManagerBasedRLEnv
            try:
                return self.base.observation_manager.compute(update_history=False)
            except TypeError:  # Isaac Lab versions without observation history
                return self.base.observation_manager.compute()
        return self.base._get_observations()  # DirectRLEnv

    def _observe(self, obs: dict) -> TensorDict:
        out: dict[str, Any] = {keys.STATE: _flat(obs["policy"], self.num_envs)}
        if keys.PRIVILEGED in self.observation_spec:
            out[keys.PRIVILEGED] = _flat(obs["critic"], self.num_envs)
        if keys.LANGUAGE in self.observation_spec:
            out[keys.LANGUAGE] = self._language
        return TensorDict(out, batch_size=[self.num_envs], device=self.device)


def _flat(group, n: int) -> torch.Tensor:
    """An observation group (a tensor, or a dict of terms when concatenate_terms=False) -> float [n, D]."""
    if isinstance(group, dict):
        return torch.cat([_flat(term, n) for term in group.values()], dim=-1)
    return group.reshape(n, -1).float()


def _flat_dim(space) -> int:
    if hasattr(space, "spaces"):
        return sum(_flat_dim(s) for s in space.spaces.values())
    return math.prod(space.shape)


def _clone(obs):
    return {k: _clone(v) for k, v in obs.items()} if isinstance(obs, dict) else obs.clone()


def _make_env(config: IsaacLabConfig, num_envs: int, device: str):
    """Launch Isaac Sim (headless) and build a registered Isaac Lab task."""
    try:
        from isaaclab.app import AppLauncher
    except ModuleNotFoundError as err:
        raise MissingExtraError(
            "env 'isaaclab' needs Isaac Lab 2.x with Isaac Sim (Python 3.11, an NVIDIA GPU): "
            "pip install 'isaaclab[isaacsim,all]' --extra-index-url https://pypi.nvidia.com"
        ) from err
    AppLauncher(headless=True, device=device)  # must run before isaaclab.envs is imported
    import gymnasium
    import isaaclab_tasks  # noqa: F401  (registers the tasks)
    from isaaclab_tasks.utils import parse_env_cfg

    cfg = parse_env_cfg(config.task, device=device, num_envs=num_envs)
    return gymnasium.make(config.task, cfg=cfg)
