"""Isaac Gym tasks (IsaacGymEnvs' `VecTask`) behind the VecEnv contract.

    import isaacgym                                    # first: Isaac Gym refuses to load after torch
    env = IsaacGymEnv(IsaacGymEnv.Config(task="Ant"), num_envs=4096, device="cuda:0")
    env = IsaacGymEnv.from_task(my_vec_task)           # or wrap a VecTask you built yourself
    obs, info = env.reset(seed=0)                            # state = obs_buf, privileged = states_buf
    obs, reward, terminated, truncated, info = env.step(action)

`VecTask.step(actions)` returns `(obs_dict, rew_buf, reset_buf, extras)`:
`reset_buf` marks finished episodes and `extras["time_outs"]` those that hit
the time limit, so `truncated = reset & time_outs`, `terminated = reset &
~time_outs`. Tensors stay on the task's `rl_device`, uncopied.

Auto-reset: Isaac Gym resets late. At the step an episode ends, `obs_buf` is
that episode's LAST observation, and the task resets the env inside the NEXT
`step` (its `post_physics_step` or `pre_physics_step` calls `reset_idx`). This
is gymnasium's "next-step" autoreset mode, and the adapter keeps it rather
than hide it:

- `info["final_obs"]` is exact: the observation returned at the done step;
- the obs row returned at a done step is that same final observation (the new
  episode's first exists only after the next step);
- on the following step `info["autoreset"]` is True for that env: its action
  was spent on the reset, its reward is reported as 0 (as gymnasium's
  next-step mode does), and the transition belongs to no episode, so learners
  should mask it out.

Seeding: Isaac Gym tasks draw from torch's GLOBAL generator, so `reset(seed)`
seeds torch, numpy and random globally (as IsaacGymEnvs' `set_seed` does),
then resets every env through one zero-action step, the way a fresh `VecTask`
(whose `reset_buf` starts at ones) produces its first observations.
Snapshots are not offered.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.registry import MissingExtraError
from embodied.specs import Spec, encode_text, text_spec


@dataclass(frozen=True)
class IsaacGymConfig:
    """Which IsaacGymEnvs task to build (ignored when wrapping a task with `from_task`)."""

    task: str = "Cartpole"  # an IsaacGymEnvs task name, as for isaacgymenvs.make
    sim_device: str = ""  # "" = the env device; Isaac Gym may simulate on the GPU and learn elsewhere
    graphics_device_id: int = -1  # -1 = no rendering (headless, no camera sensors)
    success_key: str = ""  # an `extras` entry that marks success per env (e.g. "successes"); "" = none
    instruction: str = ""  # a language instruction attached to every env; "" = no language field
    max_instruction_bytes: int = 64  # width of the `language` byte tensor

    def __post_init__(self):
        check(bool(self.task), "task must name an IsaacGymEnvs task, e.g. 'Cartpole'")
        check(len(self.instruction.encode()) <= self.max_instruction_bytes, "instruction exceeds max_instruction_bytes")


class IsaacGymEnv(VecEnv):
    """An Isaac Gym `VecTask` as a VecEnv (next-step autoreset, see the module docstring)."""

    Config = IsaacGymConfig
    # gymnasium's name for resetting during the step after a done
    metadata = {**VecEnv.metadata, "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, config: IsaacGymConfig, num_envs: int = 1, device: torch.device | str = "cuda:0", task=None):
        self.config = config
        self.task = task if task is not None else _make_task(config, num_envs, str(device))
        t = self.task
        self.num_envs = t.num_envs
        self.device = resolve_device(str(t.rl_device))
        # VecTask's timeout rule: progress_buf >= max_episode_length - 1
        self.max_episode_steps = int(t.max_episode_length) - 1
        clip = float(t.clip_obs)
        bound = (-clip, clip) if np.isfinite(clip) else (None, None)
        self.observation_spec = {keys.STATE: Spec((t.num_obs,), torch.float32, *bound)}
        if t.num_states > 0:
            self.observation_spec[keys.PRIVILEGED] = Spec((t.num_states,), torch.float32, *bound)
        if config.instruction:
            self.observation_spec[keys.LANGUAGE] = text_spec(config.max_instruction_bytes)
            self._language = encode_text([config.instruction], config.max_instruction_bytes, self.device)
            self._language = self._language.expand(self.num_envs, -1)
        low, high = np.asarray(t.action_space.low), np.asarray(t.action_space.high)
        self.action_spec = Spec((t.num_acts,), torch.float32, float(low.min()), float(high.max()))
        self._autoreset = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)

    @classmethod
    def from_task(cls, task, config: IsaacGymConfig | None = None) -> IsaacGymEnv:
        """Wrap an already built `VecTask` (yours, an IsaacGymEnvs one, or a fake)."""
        return cls(config or IsaacGymConfig(), task=task)

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        """Reset every env (seeding torch, numpy and random globally when `seed` is given)."""
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)  # also seeds every CUDA device
        self.task.reset_buf[:] = 1  # as a fresh VecTask: the next step resets every env
        obs_dict, *_ = self.task.step(self.task.zero_actions())
        self._autoreset.zero_()
        return self._observe(obs_dict), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        """One VecTask step; see the module docstring for the next-step autoreset."""
        if tuple(action.shape) != (self.num_envs, *self.action_spec.shape):
            raise ValueError(f"action shape {tuple(action.shape)} != {(self.num_envs, *self.action_spec.shape)}")
        obs_dict, reward, reset, extras = self.task.step(action.to(self.device))
        done = reset.to(self.device).bool()
        time_outs = extras.get("time_outs")
        time_outs = done & time_outs.to(self.device).bool() if time_outs is not None else torch.zeros_like(done)
        autoreset = self._autoreset
        reward = reward.to(self.device, torch.float32).masked_fill(autoreset, 0.0)
        obs = self._observe(obs_dict)
        success = extras.get(self.config.success_key) if self.config.success_key else None
        if success is None:
            success = torch.zeros_like(done)
        info = {keys.SUCCESS: success.to(self.device).bool().reshape(self.num_envs), "final_obs": obs,
                "autoreset": autoreset}
        self._autoreset = done
        return obs, reward, done & ~time_outs, time_outs, info

    def _observe(self, obs_dict: dict[str, torch.Tensor]) -> TensorDict:
        out: dict[str, Any] = {keys.STATE: obs_dict["obs"]}
        if keys.PRIVILEGED in self.observation_spec:
            out[keys.PRIVILEGED] = obs_dict["states"]
        if keys.LANGUAGE in self.observation_spec:
            out[keys.LANGUAGE] = self._language
        return TensorDict(out, batch_size=[self.num_envs], device=self.device)


def _make_task(config: IsaacGymConfig, num_envs: int, device: str):
    """Build a real IsaacGymEnvs task; isaacgym must already be imported (before torch)."""
    if "isaacgym" not in sys.modules:
        try:
            import isaacgym  # noqa: F401
        except ModuleNotFoundError as err:
            raise MissingExtraError(
                "env 'isaacgym' needs NVIDIA Isaac Gym Preview 4 and IsaacGymEnvs (not on PyPI; Python 3.6-3.8): "
                "install them from NVIDIA's download, then start with `import isaacgym` before torch"
            ) from err
        except ImportError as err:  # torch was imported first
            raise ImportError(
                f"{err}; run through `python -m sims.isaacgym ...` or put `import isaacgym` first in your script"
            ) from err
    import isaacgymenvs

    return isaacgymenvs.make(
        seed=int(torch.initial_seed() % 2**31),
        task=config.task,
        num_envs=num_envs,
        sim_device=config.sim_device or device,
        rl_device=device,
        graphics_device_id=config.graphics_device_id,
        headless=True,
    )
