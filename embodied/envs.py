"""The batched environment contract every simulator, robot and text task speaks.

A `gymnasium.vector.VectorEnv` over torch tensors on `env.device` (as ManiSkill3's
`ManiSkillVectorEnv` and Isaac Lab's envs are):

    obs, info = env.reset(seed=0)                # obs: TensorDict [N]
    obs, reward, terminated, truncated, info = env.step(action)   # action: torch or numpy [N, *A]

- `obs` is a TensorDict with batch size `[num_envs]`: `state` float [N, D],
  optionally `privileged` float [N, P] (simulator-only, for asymmetric critics),
  `images/<camera>` uint8 [N, H, W, 3] and `language` uint8 [N, L]
  (UTF-8 bytes, see `embodied.specs.decode_text`).
- `reward` float [N]; `terminated`, `truncated` bool [N]. An env that hits its
  time limit is truncated, never terminated.
- Auto-reset happens inside `step` (gymnasium's `AutoresetMode.SAME_STEP`, in
  `metadata["autoreset_mode"]`): for every env that finished, the returned `obs`
  row is already the first observation of its next episode and the last
  observation of the finished one is in `info["final_obs"]` (a TensorDict [N];
  rows of envs that did not finish hold their current observation), with
  gymnasium's mask `info["_final_obs"]` (bool [N], True where an episode ended).
- `info["success"]` bool [N]: whether the task's success criterion holds for
  each env at this step; at a done step it is the finished episode's outcome.
- Spaces (`observation_space`, `single_observation_space`, `action_space`,
  `single_action_space`) come from the per-env specs, nested like the
  observation TensorDict; gymnasium's vector wrappers (`RecordEpisodeStatistics`,
  `NormalizeReward`, ...) run on CPU envs as on any VectorEnv.
- `get_state()` / `set_state()` snapshot and restore every env exactly (physics,
  targets, step counters, random generator), for resuming runs and rewinding;
  optional: an env without them trains, and a resumed run starts from a fresh reset.

Backends implement `_reset(seed, options) -> (obs, info)` and
`_step(action) -> (obs, reward, terminated, truncated, info)`, `action` already a
tensor of `action_spec`'s dtype on `env.device`; the public `reset`/`step` here add
the gymnasium conventions once for all of them.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from embodied import keys
from embodied.specs import Spec

StepResult = tuple[TensorDict, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


class VecEnv(gymnasium.vector.VectorEnv):
    """Base class: subclasses set the attributes below and implement `_reset`/`_step`."""

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    reset_options: frozenset[str] = frozenset()  # the `options` keys `_reset` understands
    # a forked process can go on stepping it (train.collect_ahead): no native threads or GL context of its own, which a
    # fork leaves behind, or made anew in the child; pure torch sims on the CPU set it, MuJoCo envs without cameras
    fork_safe: bool = False

    num_envs: int
    device: torch.device
    observation_spec: dict[str, Spec]  # flat key (e.g. "state", "images/wrist") -> per-env spec
    action_spec: Spec
    max_episode_steps: int

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[TensorDict, dict[str, Any]]:
        """Reset every env; `seed` re-seeds the env's generator."""
        unknown = sorted(set(options or {}) - self.reset_options)
        if unknown:
            valid = ", ".join(sorted(self.reset_options)) or "none"
            raise ValueError(f"{type(self).__name__}.reset got unknown options {unknown}; valid options: {valid}")
        obs, info = self._reset(seed, options or {})
        self._last_obs = obs
        return obs, info

    def step(self, action: torch.Tensor | np.ndarray) -> StepResult:
        """Advance every env by one control step (action [N, *action_spec.shape], torch or numpy)."""
        if not isinstance(action, torch.Tensor):
            action = torch.as_tensor(np.asarray(action), dtype=self.action_spec.dtype, device=self.device)
        obs, reward, terminated, truncated, info = self._step(action)
        info["_final_obs"] = terminated | truncated
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def _reset(self, seed: int | None, options: dict[str, Any]) -> tuple[TensorDict, dict[str, Any]]:
        raise NotImplementedError

    def _step(self, action: torch.Tensor) -> StepResult:
        raise NotImplementedError

    def get_state(self) -> dict[str, torch.Tensor]:
        """A snapshot of every env, restorable with `set_state`."""
        raise NotImplementedError(f"{type(self).__name__} does not support snapshots")

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        """Restore a snapshot; returns the observation at that state."""
        raise NotImplementedError(f"{type(self).__name__} does not support snapshots")

    # --- gymnasium's spaces, from the specs ----------------------------------------------------
    @functools.cached_property
    def single_observation_space(self) -> gymnasium.spaces.Dict:
        return observation_space(self.observation_spec)

    @functools.cached_property
    def observation_space(self) -> gymnasium.spaces.Dict:
        return gymnasium.vector.utils.batch_space(self.single_observation_space, self.num_envs)

    @functools.cached_property
    def single_action_space(self) -> gymnasium.spaces.Box:
        return self.action_spec.to_gym()

    @functools.cached_property
    def action_space(self) -> gymnasium.spaces.Box:
        return gymnasium.vector.utils.batch_space(self.single_action_space, self.num_envs)

    # --- gymnasium's rendering: the first camera, for `RecordVideo` --------------------------
    @property
    def render_mode(self) -> str | None:
        """"rgb_array" when the env has a camera, else None (nothing to render)."""
        return "rgb_array" if first_camera(self.observation_spec) else None

    def render(self) -> list[np.ndarray] | None:
        """Each env's frame [H, W, 3] from its first camera, as of the last reset or step."""
        camera = first_camera(self.observation_spec)
        last = getattr(self, "_last_obs", None)
        if camera is None or last is None:
            return None
        return list(last[tuple(camera.split("/"))].cpu().numpy())

    def close(self, **kwargs: Any) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"


def first_camera(spec: dict[str, Spec]) -> str | None:
    """The first `images/<camera>` key of a spec (what `render` shows), None without a camera."""
    return next((k for k in spec if k.startswith(f"{keys.IMAGES}/")), None)


def observation_space(spec: dict[str, Spec], only: list[str] | None = None) -> gymnasium.spaces.Dict:
    """The single-env Dict space of flat `spec` keys ("images/wrist"), nested like the observation TensorDict."""
    tree: dict[str, Any] = {}
    for key in spec if only is None else only:
        *parents, leaf = key.split("/")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = spec[key].to_gym()

    def to_space(node):
        return gymnasium.spaces.Dict({k: to_space(v) if isinstance(v, dict) else v for k, v in node.items()})

    return to_space(tree)
