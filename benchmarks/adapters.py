"""Thin adapters that put one of our torch `VecEnv`s behind a peer framework's env API.

    rsl_env = RslRlVecEnv(env)             # rsl_rl.env.VecEnv (rsl-rl-lib 5.x)
    sb3_env = Sb3VecEnv(env, obs_key="state")  # stable_baselines3 VecEnv (numpy)

Both forward to the wrapped env unchanged, so every framework steps the same
simulator code; they only translate the step contract (see embodied/envs.py):

- ours:   obs, reward, terminated, truncated, info   (auto-reset, info["final_obs"])
- rsl_rl: obs, reward, dones, extras                 (auto-reset, extras["time_outs"])
- SB3:    obs, reward, dones, infos                  (auto-reset, per-env info dicts with
          "terminal_observation" and "TimeLimit.truncated")
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from embodied.envs import VecEnv

try:  # the adapters are only built when the peer is installed
    from rsl_rl.env import VecEnv as _RslRlVecEnv
except ImportError:  # pragma: no cover
    _RslRlVecEnv = object
try:
    from stable_baselines3.common.vec_env import VecEnv as _Sb3VecEnv
except ImportError:  # pragma: no cover
    _Sb3VecEnv = object


class RslRlVecEnv(_RslRlVecEnv):
    """rsl_rl's `VecEnv` (rsl_rl/env/vec_env.py, v5) over our env, as Isaac Lab's `RslRlVecEnvWrapper` does it.

    Observations pass through as the env's TensorDict: each key (`state`,
    `privileged`, ...) is an rsl_rl observation group, picked for actor and
    critic by the runner config's `obs_groups`. `dones` is terminated | truncated
    as long (Isaac Lab's dtype); `extras["time_outs"]` is the truncated mask, which
    rsl_rl's PPO uses to bootstrap `r += gamma * V(s_t)` on time-outs.
    """

    def __init__(self, env: VecEnv, seed: int | None = 0):
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = env.action_spec.shape[0]
        self.max_episode_length = env.max_episode_steps
        self.device = env.device
        self.cfg: dict = {}
        self._obs, _ = env.reset(seed=seed)

    @property
    def episode_length_buf(self) -> torch.Tensor:
        """Steps into the current episode [N] (only read by `learn(init_at_random_ep_len=True)`)."""
        steps = getattr(self.env, "steps", None)
        if steps is None:
            raise AttributeError(f"{type(self.env).__name__} exposes no per-env step counter `steps`")
        return steps

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        self.episode_length_buf.copy_(value)

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        obs, reward, terminated, truncated, info = self.env.step(actions)
        self._obs = obs
        dones = (terminated | truncated).long()
        return obs, reward, dones, {"time_outs": truncated}


class Sb3VecEnv(_Sb3VecEnv):
    """Stable-Baselines3's `VecEnv` over our torch env, one observation key as a flat Box.

    SB3 works in numpy: actions arrive as float32 [N, A] arrays and observations,
    rewards and dones leave as arrays (copied, so the env may reuse its buffers).
    Auto-reset follows SB3's convention: the returned obs row of a finished env
    is the first of its next episode, and its info dict holds the last one under
    "terminal_observation" with "TimeLimit.truncated" set for time-limit cuts, so
    SB3's PPO bootstraps them from V(terminal_observation).
    """

    def __init__(self, env: VecEnv, obs_key: str = "state"):
        self.env, self.obs_key = env, obs_key
        self.render_mode = None
        super().__init__(env.num_envs, env.observation_spec[obs_key].to_gym(), env.action_spec.to_gym())
        self._actions: torch.Tensor | None = None

    def _np(self, x: torch.Tensor) -> np.ndarray:
        return x.detach().cpu().numpy().copy()

    def reset(self) -> np.ndarray:
        seed = self._seeds[0]  # one seed drives our whole batch; SB3 gives env i seed + i
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self._reset_options()
        return self._np(obs[self.obs_key])

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = torch.as_tensor(actions, dtype=torch.float32, device=self.env.device)

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        done = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if bool(done.any()):
            final = self._np(info["final_obs"][self.obs_key])
            time_limit = (truncated & ~terminated).tolist()
            for i in done.nonzero().flatten().tolist():
                infos[i]["terminal_observation"] = final[i]
                infos[i]["TimeLimit.truncated"] = time_limit[i]
        return self._np(obs[self.obs_key]), self._np(reward), self._np(done), infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        return [getattr(self, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        setattr(self, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]
