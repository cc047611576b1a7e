"""ManiSkill3 tasks behind the VecEnv contract.

    env = ManiSkillEnv(ManiSkillEnv.Config(env_id="PickCube-v1", obs_mode="rgb"), num_envs=1024, device="cuda")
    obs, info = env.reset(seed=0)        # state [N, D], images/base_camera uint8 [N, H, W, 3], language [N, L]
    obs, reward, terminated, truncated, info = env.step(action)

The task is built with ManiSkill's own `gym.make(env_id, num_envs, obs_mode,
control_mode, sim_backend, ...)`:

- on a CUDA device (`physx_cuda`) one GPU-parallel ManiSkill env holds all
  `num_envs` scenes; its torch tensors, already on the device, pass through
  without a copy, and finished envs are reset in place with ManiSkill's partial
  reset (`reset(options={"env_idx": ...})`), as `ManiSkillVectorEnv` does;
- on the CPU (`physx_cpu`) ManiSkill simulates one scene per env, so the
  adapter holds `num_envs` of them in this process and steps them in turn
  (no subprocesses: on small machines IPC costs more than it saves).

Observations: `obs_mode="state"` maps ManiSkill's flat state vector to `state`;
`obs_mode="rgb"` maps the proprioceptive part (`agent` and `extra`, flattened
in ManiSkill's order, as its `FlattenRGBDObservationWrapper` does) to `state`
and each camera's RGB to `images/<camera>` uint8 [N, H, W, 3]. `language` is
the task's instruction (ManiSkill's tasks have none; see INSTRUCTIONS), and
`privileged=True` adds the full simulator state (`get_state()`, all poses and
velocities) for an asymmetric critic.

Episodes: ManiSkill terminates on success (or failure) and its time-limit
wrapper truncates; a step that does both counts as terminated only, as the
contract asks. `info["success"]` is ManiSkill's `info["success"]`, and
`info["final_obs"]` holds the observation a finished episode ended in (copied
before the reset, since GPU tensors may be rewritten by it).

Seeding: `reset(seed)` seeds env i's episode RNG exactly as ManiSkill seeds
the i-th env of a GPU batch, and ManiSkill's `enhanced_determinism` draws each
auto-reset's episode seed from that RNG, so whole runs repeat. Snapshots
(`get_state`/`set_state`) are not offered: restoring PhysX's state does not
replay bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import ConfigError, check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.registry import MissingExtraError
from embodied.specs import Spec, encode_text, text_spec

# ManiSkill's tasks carry no language; these describe each task's success
# condition as its `evaluate()` defines it (mani_skill/envs/tasks/tabletop/*.py).
INSTRUCTIONS = {
    "PushCube-v1": "push the cube to the goal region",
    "PickCube-v1": "pick up the cube and move it to the goal position",
    "StackCube-v1": "stack the red cube on the green cube",
    "PegInsertionSide-v1": "insert the peg into the hole on the side of the box",
    "PushT-v1": "push the T-shaped block onto the target",
    "PullCube-v1": "pull the cube to the goal region",
    "LiftPegUpright-v1": "lift the peg and stand it upright",
    "PokeCube-v1": "use the peg to poke the cube to the goal",
    "RollBall-v1": "roll the ball to the goal region",
    "PlaceSphere-v1": "place the sphere in the bin",
}


@dataclass(frozen=True)
class ManiSkillConfig:
    """Which ManiSkill3 task to build and how its observations are mapped."""

    env_id: str = "PushCube-v1"  # any registered ManiSkill task id
    obs_mode: Literal["state", "rgb"] = "state"  # ManiSkill obs_mode; rgb adds images/<camera>
    # ManiSkill's PPO baseline default (examples/baselines/ppo/ppo.py); "" = the task's own default
    control_mode: str = "pd_joint_delta_pos"
    reward_mode: Literal["normalized_dense", "dense", "sparse"] = "normalized_dense"  # ManiSkill's default
    sim_backend: Literal["auto", "physx_cpu", "physx_cuda"] = "auto"  # auto: physx_cuda on a CUDA device
    max_episode_steps: int = 0  # 0 = the task's registered limit (50 for PushCube-v1 and PickCube-v1)
    image_size: int = 128  # camera width and height in pixels, rgb only (ManiSkill's default is 128)
    instruction: str = ""  # "" = INSTRUCTIONS[env_id]
    max_instruction_bytes: int = 64  # width of the `language` byte tensor
    privileged: bool = False  # add `privileged`: the full simulator state, for an asymmetric critic
    ignore_terminations: bool = False  # as ManiSkillVectorEnv's flag: only the time limit ends episodes

    def __post_init__(self):
        check(bool(self.env_id), "env_id must name a ManiSkill task, e.g. 'PushCube-v1'")
        check(self.max_episode_steps >= 0, f"max_episode_steps={self.max_episode_steps} must be >= 0")
        check(16 <= self.image_size <= 1024, f"image_size={self.image_size} must be in [16, 1024]")
        text = self.instruction or INSTRUCTIONS.get(self.env_id, "")
        check(
            bool(text),
            f"env_id={self.env_id!r} has no built-in instruction; set instruction "
            f"(built in for: {', '.join(sorted(INSTRUCTIONS))})",
        )
        check(
            len(text.encode()) <= self.max_instruction_bytes,
            f"instruction {text!r} is longer than max_instruction_bytes={self.max_instruction_bytes}",
        )


class ManiSkillEnv(VecEnv):
    """`num_envs` copies of one ManiSkill3 task (GPU-parallel on CUDA, one scene per env on the CPU)."""

    Config = ManiSkillConfig

    def __init__(self, config: ManiSkillConfig, num_envs: int = 1, device: torch.device | str = "cpu"):
        check(num_envs >= 1, f"num_envs={num_envs} must be >= 1")
        import gymnasium as gym

        try:
            import mani_skill.envs  # noqa: F401  (registers the tasks with gymnasium)
        except ModuleNotFoundError as err:
            raise MissingExtraError(f"env 'maniskill' needs {err.name!r}: pip install -e '.[maniskill]'") from err
        from mani_skill.utils.registration import REGISTERED_ENVS

        self.config, self.num_envs = config, num_envs
        self.device = resolve_device(str(device))
        if config.env_id not in REGISTERED_ENVS:
            choices = sorted(REGISTERED_ENVS)
            raise ConfigError(f"env_id={config.env_id!r} is not a ManiSkill task; valid choices: {choices}")
        backend = config.sim_backend
        if backend == "auto":
            backend = "physx_cuda" if self.device.type == "cuda" else "physx_cpu"
        if backend == "physx_cuda" and self.device.type != "cuda":
            raise ConfigError(f"sim_backend='physx_cuda' gives CUDA tensors; device={str(self.device)!r} must be cuda")
        self.sim_backend = backend
        self.max_episode_steps = config.max_episode_steps or REGISTERED_ENVS[config.env_id].max_episode_steps
        kwargs: dict[str, Any] = dict(
            obs_mode=config.obs_mode,
            reward_mode=config.reward_mode,
            sim_backend=backend,
            render_backend="gpu" if backend == "physx_cuda" else "cpu",
            max_episode_steps=self.max_episode_steps,
            enhanced_determinism=True,  # auto-reset episodes drawn from the seeded RNG (see reset)
            sensor_configs=dict(width=config.image_size, height=config.image_size),
        )
        if config.control_mode:
            kwargs["control_mode"] = config.control_mode
        # one GPU-parallel env, or one single-scene env per env on the CPU
        counts = [num_envs] if backend == "physx_cuda" else [1] * num_envs
        self.maniskill_envs = [gym.make(config.env_id, num_envs=n, **kwargs) for n in counts]
        self._counts = counts
        base = self.maniskill_envs[0].unwrapped
        self._sim_device = base.device
        self._seeded = False

        space = base.single_action_space
        low, high = np.asarray(space.low, np.float64), np.asarray(space.high, np.float64)
        # a uniformly bounded action space is passed through as is; per-dimension
        # bounds (e.g. pd_joint_pos joint limits) are exposed as [-1, 1] and rescaled
        self._uniform = bool((low == low.flat[0]).all() and (high == high.flat[0]).all())
        if self._uniform:
            self.action_spec = Spec(tuple(space.shape), torch.float32, float(low.flat[0]), float(high.flat[0]))
        else:
            self.action_spec = Spec(tuple(space.shape), torch.float32, -1.0, 1.0)
            self._action_mid = torch.tensor((high + low) / 2, dtype=torch.float32, device=self._sim_device)
            self._action_half = torch.tensor((high - low) / 2, dtype=torch.float32, device=self._sim_device)

        text = config.instruction or INSTRUCTIONS[config.env_id]
        self._language = encode_text([text], config.max_instruction_bytes, self.device).expand(num_envs, -1)
        self.observation_spec = self._specs(base.single_observation_space)
        self.observation_spec[keys.LANGUAGE] = text_spec(config.max_instruction_bytes)
        self.metadata = {**self.metadata, "render_fps": base.control_freq}  # a frame per step, for RecordVideo
        if config.privileged:
            self.observation_spec[keys.PRIVILEGED] = Spec((base.get_state().shape[-1],), torch.float32)

    # --- the VecEnv verbs -------------------------------------------------

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        """Reset every env; env i gets the episode seed ManiSkill gives env i of a batch seeded `seed`.

        Unseeded, the first reset draws its seed from torch's global generator,
        so a run seeded with `torch.manual_seed` repeats.
        """
        if seed is None and not self._seeded:
            seed = int(torch.randint(0, 2**31 - 1, ()))
        if seed is None:
            raws = [env.reset()[0] for env in self.maniskill_envs]
        else:
            self._seeded = True
            if len(self.maniskill_envs) == 1:  # ManiSkill derives the per-env seeds itself
                raws = [self.maniskill_envs[0].reset(seed=seed)[0]]
            else:  # the same derivation as ManiSkill's _set_episode_rng, one seed per CPU env
                more = np.random.RandomState(seed).randint(2**31, size=self.num_envs - 1).tolist()
                raws = [env.reset(seed=s)[0] for env, s in zip(self.maniskill_envs, [seed, *more])]
        return self._batch([self._map(raw, env) for raw, env in zip(raws, self.maniskill_envs)]), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        """Advance every env one control step; action [N, *action_spec.shape]."""
        if tuple(action.shape) != (self.num_envs, *self.action_spec.shape):
            raise ValueError(f"action shape {tuple(action.shape)} != {(self.num_envs, *self.action_spec.shape)}")
        if action.device != self._sim_device or action.dtype != torch.float32:
            action = action.to(self._sim_device, torch.float32)
        if not self._uniform:
            action = self._action_mid + self._action_half * action.clamp(-1.0, 1.0)
        if len(self.maniskill_envs) == 1:
            results = [self._step_part(self.maniskill_envs[0], action)]
        else:
            results = [self._step_part(env, action[i : i + 1]) for i, env in enumerate(self.maniskill_envs)]
        obs = self._batch([r[0] for r in results])
        any_done = any(r[1] is not None for r in results)
        final = self._batch([r[0] if r[1] is None else r[1] for r in results]) if any_done else obs
        reward, terminated, truncated, success = (_cat([r[k] for r in results]) for k in range(2, 6))
        if self.device != self._sim_device:  # a CPU simulation feeding a CUDA learner
            moved = (x.to(self.device) for x in (reward, terminated, truncated, success))
            reward, terminated, truncated, success = moved
        info = {keys.SUCCESS: success, "final_obs": final}
        return obs, reward.float(), terminated, truncated, info

    def close(self) -> None:
        for env in self.maniskill_envs:
            env.close()
        self.maniskill_envs = []

    # --- internals -------------------------------------------------------

    def _step_part(self, env, action: torch.Tensor):
        """Step one ManiSkill env; auto-reset its finished scenes.

        Returns (obs, final_obs or None when nothing finished, reward, terminated, truncated, success).
        """
        obs, reward, terminated, truncated, info = env.step(action)
        n = reward.shape[0]
        if not isinstance(terminated, torch.Tensor) or terminated.shape != (n,):  # ManiSkill gives bool [n]
            terminated = torch.as_tensor(terminated, device=reward.device).reshape(n)
        if not isinstance(truncated, torch.Tensor) or truncated.shape != (n,):
            truncated = torch.as_tensor(truncated, device=reward.device).reshape(n)
        success = info["success"] if "success" in info else torch.zeros(n, dtype=torch.bool, device=reward.device)
        if self.config.ignore_terminations:
            terminated = torch.zeros_like(terminated)
        done = terminated | truncated
        final = None
        if bool(done.any()):  # the per-step work stays at two small ops when nothing ends
            truncated = truncated & ~terminated  # a step that terminates is not also truncated
            # ManiSkill may rewrite the tensors it returned when it resets: copy first
            final = _clone(self._map(obs, env))
            if n == 1:
                obs = env.reset()[0]
            else:
                obs = env.reset(options={"env_idx": done.nonzero().squeeze(-1)})[0]
        return self._map(obs, env), final, reward, terminated, truncated, success

    def _map(self, raw, env) -> dict[str, Any]:
        """One ManiSkill env's observation -> our layout (without language)."""
        if self.config.obs_mode == "state":
            out: dict[str, Any] = {keys.STATE: raw.float()}
        else:
            out = {keys.STATE: _flat_state(raw)}
            out[keys.IMAGES] = {cam: sensor["rgb"] for cam, sensor in raw["sensor_data"].items()}
        if self.config.privileged:
            out[keys.PRIVILEGED] = env.unwrapped.get_state().float()
        return out

    def _batch(self, parts: list[dict[str, Any]]) -> TensorDict:
        """Mapped observations of every ManiSkill env -> one TensorDict [N]."""
        out = dict(parts[0]) if len(parts) == 1 else _merge(parts)
        out[keys.LANGUAGE] = self._language
        return TensorDict(out, batch_size=[self.num_envs], device=self.device)

    def _specs(self, space) -> dict[str, Spec]:
        """Per-env specs from ManiSkill's single-env observation space."""
        if self.config.obs_mode == "state":
            return {keys.STATE: Spec((int(np.prod(space.shape)),), torch.float32)}
        dim = sum(int(np.prod(s.shape)) for group in ("agent", "extra") for s in _leaves(space[group]))
        specs = {keys.STATE: Spec((dim,), torch.float32)}
        for cam, sensor in space["sensor_data"].items():
            specs[f"{keys.IMAGES}/{cam}"] = Spec(tuple(sensor["rgb"].shape), torch.uint8, 0, 255)
        return specs


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Concatenate nested dicts of [n_i, ...] tensors along the first dimension."""
    return {
        k: _merge([p[k] for p in parts]) if isinstance(v, dict) else torch.cat([p[k] for p in parts])
        for k, v in parts[0].items()
    }


def _leaves(space) -> list:
    if hasattr(space, "spaces"):
        return [leaf for sub in space.spaces.values() for leaf in _leaves(sub)]
    return [space]


def _flat_state(obs: dict) -> torch.Tensor:
    """agent and extra entries, flattened in ManiSkill's order, as float32 [n, D]."""
    leaves: list[torch.Tensor] = []

    def walk(d):
        for v in d.values():
            if isinstance(v, dict):
                walk(v)
            else:
                leaves.append(v.reshape(v.shape[0], -1).float())

    walk(obs["agent"])
    walk(obs["extra"])
    return torch.cat(leaves, dim=-1)


def _cat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _clone(obs):
    if isinstance(obs, dict):
        return {k: _clone(v) for k, v in obs.items()}
    return obs.clone()
