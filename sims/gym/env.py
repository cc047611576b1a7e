"""Any gymnasium environment behind the VecEnv contract, vectorised by gymnasium itself.

    env = GymEnv(GymEnv.Config(id="HalfCheetah-v5"), num_envs=8)
    obs, info = env.reset(seed=0)                  # state float32 [8, 17]
    obs, reward, terminated, truncated, info = env.step(action)   # action [8, 6] in [-1, 1]

    embodied train env=gym env.id=Pendulum-v1
    embodied train env=gym env.id=my_pkg.envs:MyEnv-v0   # imports my_pkg.envs (which registers it), then makes it

The id is built with `gymnasium.make_vec(id, num_envs, vectorization_mode=...)` in
gymnasium's same-step autoreset mode, so a finished env's last observation comes
back in gymnasium's `info["final_obs"]` and is mapped like any other.

Observations (per env; anything else raises a ConfigError naming the space):
- a Box -> `state` float32, flattened; a uint8 [H, W, 3] Box -> `images/pixels`;
- a Dict (nested allowed) -> every uint8 [H, W, 3] Box as `images/<key>` (nested
  keys joined by "_"), every other Box flattened and concatenated into `state`
  float32 in the space's key order (gymnasium sorts Dict keys), as gymnasium's
  `FlattenObservation` orders them.

Actions: a 1-D float Box. The framework's Gaussian policies assume actions in
[-1, 1] (policies/mlp.py `init_std`), so a Box with finite bounds is exposed as
`action_spec` [-1, 1] and mapped linearly onto [low, high] after clipping to
[-1, 1] (SB3 and CleanRL clip to the bounds too; the linear map is the identity
for the MuJoCo tasks, whose bounds are already [-1, 1], and doubles Pendulum's);
a Box unbounded on every side is passed through unscaled. Discrete, MultiDiscrete
and the other spaces raise a ConfigError: these policies are Gaussian.

Episodes: a time limit truncates, never terminates (a step that does both counts
as terminated). `info["success"]` is the env's `is_success` (or `success`) info
entry where it has one, else False. Snapshots (`get_state`/`set_state`) are not
offered: a gymnasium env's state is not a set of tensors in general.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass, field
from typing import Any, Literal

import gymnasium
import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import ConfigError, check
from embodied.device import resolve_device
from embodied.envs import StepResult, VecEnv
from embodied.registry import MissingExtraError
from embodied.specs import Spec

SUCCESS_KEYS = ("is_success", "success")  # gymnasium-robotics / SB3 spell it is_success, others success
_Path = tuple[str, ...]  # where a leaf sits in a (Dict) observation; () = the observation itself


@dataclass(frozen=True)
class GymConfig:
    """Which gymnasium env to build and how to vectorise it."""

    # a registered gymnasium id ("Pendulum-v1", "HalfCheetah-v5") or "module:Id-v0" (imports module, then makes
    # Id-v0); "" is an error at build time (the CLI builds this Config with its defaults to list the fields)
    id: str = ""
    # gymnasium's SyncVectorEnv (one process) or AsyncVectorEnv (one subprocess per env); async is IPC-bound on
    # small machines: HalfCheetah x8 ran at 0.22x a single env vs 0.71x for sync (shared/ENVIRONMENT.md)
    vectorization: Literal["sync", "async"] = "sync"
    # keyword arguments of gymnasium.make, e.g. {continuous: true}; from the CLI: +env.kwargs.<name>=<value>
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None  # time limit; None = the id's registered limit

    def __post_init__(self):
        check(self.vectorization in ("sync", "async"), f"env.vectorization={self.vectorization!r}: 'sync' or 'async'")
        check(isinstance(self.kwargs, dict), f"env.kwargs={self.kwargs!r} must be a mapping")
        check(self.max_episode_steps is None or self.max_episode_steps >= 1, "env.max_episode_steps must be >= 1")


class GymEnv(VecEnv):
    """`num_envs` copies of one gymnasium env in a gymnasium Sync/AsyncVectorEnv, as torch tensors."""

    Config = GymConfig

    def __init__(self, config: GymConfig, num_envs: int = 1, device: torch.device | str = "cpu"):
        check(num_envs >= 1, f"num_envs={num_envs} must be >= 1")
        self.config, self.num_envs = config, num_envs
        self.device = resolve_device(str(device))
        spec = find_spec(config.id)
        self.max_episode_steps = config.max_episode_steps or spec.max_episode_steps
        if not self.max_episode_steps:
            raise ConfigError(f"{config.id!r} registers no time limit; set env.max_episode_steps")
        kwargs = dict(config.kwargs)
        if config.max_episode_steps:
            kwargs["max_episode_steps"] = config.max_episode_steps
        vector_kwargs = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP, "copy": False}  # we copy once
        try:
            self.gym_env = gymnasium.make_vec(spec, num_envs, config.vectorization, vector_kwargs, **kwargs)
        except gymnasium.error.DependencyNotInstalled as err:
            hint = "MuJoCo tasks: pip install -e '.[gym]'"
            raise MissingExtraError(f"env 'gym' with id {config.id!r}: {err} ({hint})") from err
        except TypeError as err:  # a keyword the env's constructor does not take
            raise ConfigError(f"env.id={config.id!r} with env.kwargs={config.kwargs}: {err}") from None
        try:
            self.observation_spec, self._layout = observation_layout(self.gym_env.single_observation_space)
            self.action_spec, self._action_map = action_mapping(self.gym_env.single_action_space)
        except ConfigError as err:
            self.gym_env.close()
            raise ConfigError(f"env.id={config.id!r}: {err}") from None
        self._seeded = False

    # --- the VecEnv verbs -------------------------------------------------

    def _reset(self, seed: int | None, options: dict) -> tuple[TensorDict, dict]:
        """Reset every env; env i is seeded `seed + i` (gymnasium's vector convention).

        Unseeded, the first reset draws its seed from torch's global generator, so a run seeded with
        `torch.manual_seed` repeats; later unseeded resets continue each env's own generator.
        """
        if seed is None and not self._seeded:
            seed = int(torch.randint(0, 2**31 - 1, ()))
        self._seeded = True
        obs, _ = self.gym_env.reset(seed=seed)
        return self._obs(obs, self.num_envs), {}

    def _step(self, action: torch.Tensor) -> StepResult:
        """Advance every env one step; action [N, *action_spec.shape] in [-1, 1] (see the module docstring)."""
        if tuple(action.shape) != (self.num_envs, *self.action_spec.shape):
            raise ValueError(f"action shape {tuple(action.shape)} != {(self.num_envs, *self.action_spec.shape)}")
        raw, reward, terminated, truncated, gym_info = self.gym_env.step(self._action_map(action))
        obs = self._obs(raw, self.num_envs)
        terminated = torch.from_numpy(np.asarray(terminated, dtype=bool))
        truncated = torch.from_numpy(np.asarray(truncated, dtype=bool) & ~terminated.numpy())
        done = np.asarray(gym_info.get("_final_obs", np.zeros(self.num_envs, bool)))
        final = obs
        if done.any():  # the finished envs' last observations, in place of the reset ones
            rows = np.flatnonzero(done)
            final = obs.clone()
            final[torch.from_numpy(rows)] = self._obs(_stack(list(gym_info["final_obs"][rows])), len(rows))
        info = {keys.SUCCESS: _success(gym_info, done).to(self.device), "final_obs": final}
        reward = torch.from_numpy(np.asarray(reward, dtype=np.float32))
        return obs, reward.to(self.device), terminated.to(self.device), truncated.to(self.device), info

    def get_state(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError("GymEnv does not support snapshots: a gymnasium env's state is not a set of "
                                  "tensors in general (a resumed run starts from a fresh reset)")

    def set_state(self, state: dict[str, torch.Tensor]) -> TensorDict:
        return self.get_state()  # raises

    def close(self, **kwargs: Any) -> None:
        self.gym_env.close()
        super().close()

    # --- internals -------------------------------------------------------

    def _obs(self, raw: Any, n: int) -> TensorDict:
        """A batch of gymnasium observations [n] -> our TensorDict [n] (copied: the vector env reuses its arrays)."""
        out: dict[str, Any] = {}
        for key, paths in self._layout.items():
            parts = [_get(raw, path) for path in paths]
            if key == keys.STATE:
                parts = [p.reshape(n, -1) for p in parts]
                value = parts[0].astype(np.float32) if len(parts) == 1 else np.concatenate(parts, 1, dtype=np.float32)
            else:
                value = parts[0].copy()
            out[key] = torch.from_numpy(value)
        return TensorDict(out, batch_size=[n], device=self.device).unflatten_keys("/")


def find_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    """The EnvSpec of `env_id`, importing `module` first for "module:Id"; a ConfigError with close matches if none."""
    if not env_id:
        raise ConfigError("env.id is empty: set env.id=<gymnasium id>, e.g. env.id=Pendulum-v1 or "
                          "env.id=my_pkg.envs:MyEnv-v0; list the ids with "
                          "python -c 'import gymnasium; gymnasium.pprint_registry()'")
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            raise ConfigError(f"env.id={env_id!r}: cannot import module {module!r} ({err}); it must be importable "
                              f"(on PYTHONPATH) and register {name!r} with gymnasium.register") from err
    try:
        return gymnasium.spec(name)
    except gymnasium.error.Error as err:
        close = difflib.get_close_matches(name, list(gymnasium.registry), n=5, cutoff=0.5)
        hint = f"; close matches: {', '.join(close)}" if close else ""
        raise ConfigError(f"env.id={env_id!r} is not a registered gymnasium id ({err}){hint}. List the ids with "
                          "python -c 'import gymnasium; gymnasium.pprint_registry()'") from None


def observation_layout(space: gymnasium.Space) -> tuple[dict[str, Spec], dict[str, list[_Path]]]:
    """Per-env specs and, for each of our keys, where its parts sit in a gymnasium observation."""
    images: dict[str, _Path] = {}
    state: list[tuple[_Path, int]] = []

    def walk(node: gymnasium.Space, path: _Path) -> None:
        where = "the observation" if not path else f"observation key {'/'.join(path)!r}"
        if isinstance(node, gymnasium.spaces.Dict):
            for name, sub in node.spaces.items():
                walk(sub, (*path, name))
        elif isinstance(node, gymnasium.spaces.Box) and _is_image(node):
            images[f"{keys.IMAGES}/{'_'.join(path) or 'pixels'}"] = path
        elif isinstance(node, gymnasium.spaces.Box) and node.dtype != np.uint8:
            state.append((path, int(np.prod(node.shape))))
        else:
            raise ConfigError(f"{where} is {node}, which GymEnv does not map: it takes Box (float, or uint8 "
                              "[H, W, 3] images) and Dict spaces of them; wrap the env (e.g. gymnasium's "
                              "FlattenObservation or a one-hot wrapper) and register the wrapped id")

    walk(space, ())
    specs: dict[str, Spec] = {}
    layout: dict[str, list[_Path]] = {}
    if state:
        # one scalar bound per side for the whole vector: the env's own bounds where it declares them finite
        # (Pendulum's [-8, 8]), else unbounded on that side (the MuJoCo tasks' velocities)
        low = min(float(_get(space, path).low.min()) for path, _ in state)
        high = max(float(_get(space, path).high.max()) for path, _ in state)
        specs[keys.STATE] = Spec((sum(size for _, size in state),), torch.float32,
                                 low if np.isfinite(low) else None, high if np.isfinite(high) else None)  # fmt: skip
        layout[keys.STATE] = [path for path, _ in state]
    for key, path in images.items():
        specs[key] = Spec(tuple(_get(space, path).shape), torch.uint8, 0, 255)
        layout[key] = [path]
    return specs, layout


def action_mapping(space: gymnasium.Space):
    """The action spec and the map from a policy action (torch [N, A]) to the gymnasium action (numpy)."""
    box = isinstance(space, gymnasium.spaces.Box) and len(space.shape) == 1
    if not (box and np.issubdtype(space.dtype, np.floating)):
        discrete = isinstance(space, (gymnasium.spaces.Discrete, gymnasium.spaces.MultiDiscrete))
        hint = (" (some envs have a continuous variant: e.g. LunarLander-v3 with +env.kwargs.continuous=true, "
                "or MountainCarContinuous-v0)") if discrete else ""
        raise ConfigError(f"the action space is {space}; GymEnv takes a 1-D float Box, since the framework's "
                          f"policies are Gaussian{hint}")
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    dtype = space.dtype
    if np.isinf(low).all() and np.isinf(high).all():
        return Spec(space.shape, torch.float32), lambda a: a.detach().to("cpu", torch.float32).numpy().astype(dtype)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ConfigError(f"the action space {space} is bounded on some sides only; GymEnv takes a Box bounded "
                          "everywhere (mapped from [-1, 1]) or unbounded everywhere (passed through)")
    mid = torch.tensor((high + low) / 2, dtype=torch.float32)
    half = torch.tensor((high - low) / 2, dtype=torch.float32)

    def to_gym(action: torch.Tensor) -> np.ndarray:
        action = action.detach().to("cpu", torch.float32).clamp(-1.0, 1.0)
        return (mid + half * action).numpy().astype(dtype, copy=False)

    return Spec(space.shape, torch.float32, -1.0, 1.0), to_gym


def _is_image(space: gymnasium.spaces.Box) -> bool:
    return space.dtype == np.uint8 and len(space.shape) == 3 and space.shape[-1] == 3


def _get(tree: Any, path: _Path) -> Any:
    for name in path:
        tree = tree[name]
    return tree


def _stack(items: list[Any]) -> Any:
    """gymnasium's per-env final observations -> one batched observation."""
    if isinstance(items[0], dict):
        return {k: _stack([item[k] for item in items]) for k in items[0]}
    return np.stack(items)


def _success(info: dict[str, Any], done: np.ndarray) -> torch.Tensor:
    """bool [N]: the env's success entry; at a done step the finished episode's (in `final_info`)."""
    out = np.zeros(len(done), dtype=bool)
    for source, rows in ((info, ~done), (info.get("final_info", {}), done)):
        key = next((k for k in SUCCESS_KEYS if k in source), None)
        if key is not None:
            has = np.asarray(source[f"_{key}"], dtype=bool) & rows
            out[has] = np.asarray(source[key], dtype=bool)[has]
    return torch.from_numpy(out)
