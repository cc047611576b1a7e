"""A single-env gymnasium view of a VecEnv with num_envs=1 (numpy in, numpy out).

    env = GymView(registry.build("env", "arm_reach", {}, num_envs=1))
    gymnasium.utils.env_checker.check_env(env)
    obs, info = env.reset(seed=0)               # {"state": float32 [D], "images/<camera>": uint8 [H, W, 3], ...}
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())

Spaces come from the VecEnv's specs (`Spec.to_gym`), keyed by the flat
observation keys. `privileged` (simulator-only quantities for an asymmetric
critic) is left out unless asked for: a library that feeds every key of a Dict
observation to its policy (Stable-Baselines3's `MultiInputPolicy`) would
otherwise hand the actor what no robot measures. Gymnasium's single-env API
does not auto-reset: at a done step the view returns the finished episode's
final observation (`info["final_obs"]` of the VecEnv), and the caller resets,
which re-seeds nothing unless a seed is given. `render()` gives the frame of
the env's first camera (`render_mode` "rgb_array"), for gymnasium's `RecordVideo`.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch
from tensordict import TensorDictBase

from embodied import keys
from embodied.envs import VecEnv, first_camera


class GymView(gymnasium.Env):
    """gymnasium.Env over env 0 of a one-env VecEnv; `privileged=True` adds the `privileged` key."""

    def __init__(self, env: VecEnv, privileged: bool = False):
        if env.num_envs != 1:
            raise ValueError(f"GymView needs a VecEnv with num_envs=1, got num_envs={env.num_envs}")
        self.env = env
        self._keys = [k for k in env.observation_spec if privileged or k != keys.PRIVILEGED]
        self.observation_space = gymnasium.spaces.Dict({k: env.observation_spec[k].to_gym() for k in self._keys})
        self.action_space = env.action_spec.to_gym()
        self._action_dtype = env.action_spec.dtype
        # the first camera, as VecEnv.render picks it (rendered here from the view's own last observation)
        self._camera = first_camera(env.observation_spec)
        self.render_mode = env.render_mode
        self.metadata = {"render_modes": [self.render_mode] if self.render_mode else []}
        if "render_fps" in env.metadata:  # else RecordVideo writes at its default of 30
            self.metadata["render_fps"] = env.metadata["render_fps"]
        self._last: dict[str, np.ndarray] | None = None

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict[str, np.ndarray], dict]:
        super().reset(seed=seed)
        self._last = self._numpy(self.env.reset(seed=seed, options=options)[0])
        return self._last, {}

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        action = torch.as_tensor(np.asarray(action), dtype=self._action_dtype).reshape(1, *self.env.action_spec.shape)
        obs, reward, terminated, truncated, info = self.env.step(action.to(self.env.device))
        done = bool(terminated[0] or truncated[0])
        self._last = self._numpy(info["final_obs"] if done else obs)
        success = bool(info[keys.SUCCESS][0])
        return self._last, float(reward[0]), bool(terminated[0]), bool(truncated[0]), {keys.SUCCESS: success}

    def render(self) -> np.ndarray | None:
        """The first camera's frame [H, W, 3] of the last observation returned (at a done step the final one,
        where VecEnv.render would show the next episode's first), None without a camera or before a reset."""
        if self._camera is None or self._last is None:
            return None
        return self._last[self._camera]

    def close(self) -> None:
        self.env.close()

    def _numpy(self, obs) -> dict[str, np.ndarray]:
        flat = obs.flatten_keys("/")
        # copies: gymnasium's callers keep what they are given, and a VecEnv may reuse its tensors
        return {k: flat[k][0].detach().cpu().numpy().copy() for k in self._keys}


class NumpyView(gymnasium.vector.VectorWrapper):
    """A VecEnv with numpy out (CPU copies) and numpy or torch in, for gymnasium's numpy vector wrappers.

        envs = NormalizeReward(RecordEpisodeStatistics(NumpyView(env)))

    Observations become the nested dict of arrays that `env.observation_space` describes; `info`'s tensors and
    TensorDicts (`final_obs`, `success`, `_final_obs`) become arrays and dicts of arrays the same way.
    """

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        return _to_numpy(obs), _to_numpy(info)

    def step(self, actions) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, dict]:
        return tuple(_to_numpy(x) for x in self.env.step(actions))


def _to_numpy(x):
    if isinstance(x, (torch.Tensor, TensorDictBase)):
        return x.detach().cpu().numpy()  # a TensorDict gives its nested dict of arrays
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    return x
