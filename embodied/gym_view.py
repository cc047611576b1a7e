"""A single-env gymnasium view of a VecEnv with num_envs=1 (numpy in, numpy out).

    env = GymView(registry.build("env", "arm_reach", {}, num_envs=1))
    gymnasium.utils.env_checker.check_env(env)
    obs, info = env.reset(seed=0)               # {"state": float32 [D], "images/<camera>": uint8 [H, W, 3], ...}
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

Spaces come from the VecEnv's specs (`Spec.to_gym`), keyed by the flat
observation keys. Gymnasium's single-env API does not auto-reset: at a done
step the view returns the finished episode's final observation
(`info["final_obs"]` of the VecEnv), and the caller resets, which re-seeds
nothing unless a seed is given.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch

from embodied import keys
from embodied.envs import VecEnv


class GymView(gymnasium.Env):
    """gymnasium.Env over env 0 of a one-env VecEnv."""

    metadata = {"render_modes": []}

    def __init__(self, env: VecEnv):
        if env.num_envs != 1:
            raise ValueError(f"GymView needs a VecEnv with num_envs=1, got num_envs={env.num_envs}")
        self.env = env
        self.observation_space = gymnasium.spaces.Dict({k: s.to_gym() for k, s in env.observation_spec.items()})
        self.action_space = env.action_spec.to_gym()
        self._action_dtype = env.action_spec.dtype

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        return self._numpy(self.env.reset(seed=seed)), {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        action = torch.as_tensor(np.asarray(action), dtype=self._action_dtype).reshape(1, *self.env.action_spec.shape)
        obs, reward, terminated, truncated, info = self.env.step(action.to(self.env.device))
        done = bool(terminated[0] or truncated[0])
        out = self._numpy(info["final_obs"] if done else obs)
        success = bool(info[keys.SUCCESS][0])
        return out, float(reward[0]), bool(terminated[0]), bool(truncated[0]), {keys.SUCCESS: success}

    def close(self) -> None:
        self.env.close()

    def _numpy(self, obs) -> dict[str, np.ndarray]:
        flat = obs.flatten_keys("/")
        # copies: gymnasium's callers keep what they are given, and a VecEnv may reuse its tensors
        return {k: flat[k][0].detach().cpu().numpy().copy() for k in self.env.observation_spec}
