"""The batched environment contract every simulator, robot and text task speaks.

Gymnasium's vector API over torch tensors on `env.device` (as in ManiSkill3 and
Isaac Lab):

    obs = env.reset(seed=0)                      # TensorDict [N]
    obs, reward, terminated, truncated, info = env.step(action)

- `obs` is a TensorDict with batch size `[num_envs]`: `state` float [N, D],
  optionally `privileged` float [N, P] (simulator-only, for asymmetric critics),
  `images/<camera>` uint8 [N, H, W, 3] and `language` uint8 [N, L]
  (UTF-8 bytes, see `embodied.specs.decode_text`).
- `reward` float [N]; `terminated`, `truncated` bool [N]. An env that hits its
  time limit is truncated, never terminated.
- Auto-reset happens inside `step`: for every env that finished, the returned
  `obs` row is already the first observation of its next episode and the last
  observation of the finished one is in `info["final_obs"]` (a TensorDict [N];
  rows of envs that did not finish hold their current observation).
- `info["success"]` bool [N]: whether the task's success criterion holds for
  each env at this step; at a done step it is the finished episode's outcome.
- `get_state()` / `set_state()` snapshot and restore every env exactly (physics,
  targets, step counters, random generator), for resuming runs and rewinding.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from embodied.specs import Spec

StepResult = tuple[TensorDict, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


class VecEnv:
    """Base class: subclasses set the attributes below and implement reset/step."""

    num_envs: int
    device: torch.device
    observation_spec: dict[str, Spec]  # key (e.g. "state", "images/wrist") -> per-env spec
    action_spec: Spec
    max_episode_steps: int

    def reset(self, seed: int | None = None) -> TensorDict:
        """Reset every env; `seed` re-seeds the env's generator."""
        raise NotImplementedError

    def step(self, action: torch.Tensor) -> StepResult:
        """Advance every env by one control step (action [N, *action_spec.shape])."""
        raise NotImplementedError

    def get_state(self) -> dict[str, torch.Tensor]:
        """A snapshot of every env, restorable with `set_state`."""
        raise NotImplementedError(f"{type(self).__name__} does not support snapshots")

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        """Restore a snapshot; returns the observation at that state."""
        raise NotImplementedError(f"{type(self).__name__} does not support snapshots")

    def close(self) -> None:
        pass

    def __enter__(self) -> VecEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_envs={self.num_envs}, device={self.device})"
