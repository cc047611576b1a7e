"""Training data from episode stores: `data=<store>` (or a list) feeds a pipeline's stages instead of regenerated
scripted demonstrations.

    demos = load_transitions(["corrections/episodes.zarr"], env.observation_spec, env.action_spec, gamma=0.99)
    # TensorDict [M]: obs/<k>, next_obs/<k>, action, reward, terminated, truncated, mc_return (+ is_intervention)

A source is one of our stores (`embodied correct`, `embodied data import`) or a LeRobot v3 dataset directory
(imported once into a cached store; `observation.state` -> `obs/state`, ...: embodied/data/lerobot_format.py). Rows: `obs/<key>` for every key of
the env's observation spec, `action`, `reward`, `terminated`, `truncated`, optionally `next_obs/<key>` (else the
next row's observation; an episode's last row then ends truncated on its own observation). Rows a rewind abandoned
(`rewound`, correction sessions) are left out: they are not the behaviour anybody chose to keep.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.advantages import discounted_returns
from embodied.config import ConfigError
from embodied.data.store import EpisodeStore
from embodied.specs import Spec

REQUIRED = (keys.ACTION, keys.REWARD, keys.TERMINATED)  # `truncated` optional: a LeRobot dataset has none


def store_path(path: str | Path, language_bytes: int = 128) -> Path:
    """A store directory, the folder a session wrote it into (`corrections/` -> `corrections/episodes.zarr`), or a
    LeRobot v3 dataset, imported once into a store in the cache (`$EMBODIED_CACHE`, default ~/.cache/embodied) and
    reused while the dataset's files are unchanged."""
    path = Path(path)
    if (path / "episodes.zarr").is_dir():
        return path / "episodes.zarr"
    if (path / "meta" / "info.json").is_file():
        from embodied.data.lerobot_format import import_lerobot

        files = sorted(f for f in path.rglob("*") if f.is_file())
        stamp = hashlib.sha256(repr([(str(f.relative_to(path)), f.stat().st_size, f.stat().st_mtime_ns)
                                     for f in files] + [str(path.resolve()), language_bytes]).encode()).hexdigest()[:16]
        cached = Path(os.environ.get("EMBODIED_CACHE", Path.home() / ".cache" / "embodied")) / "lerobot" / \
            f"{path.resolve().name}-{stamp}.zarr"
        if not (cached / "zarr.json").exists():
            print(f"data: importing the LeRobot dataset {path} into {cached} (once)", flush=True)
            cached.parent.mkdir(parents=True, exist_ok=True)
            import_lerobot(path, cached, max_language_bytes=language_bytes, progress=True).close()
        return cached
    if not path.is_dir():
        raise FileNotFoundError(f"data={path}: no episode store or LeRobot dataset there")
    return path


def load_transitions(paths: list[str | Path], observation_spec: dict[str, Spec], action_spec: Spec,
                     gamma: float) -> TensorDict:
    """Every kept row of every store in `paths`, checked against the env's specs (one error naming the store, the
    key, both shapes and the fix), with the discounted return-to-go of each episode (`mc_return`)."""
    language = observation_spec.get(keys.LANGUAGE)
    width = language.shape[0] if language is not None else 128
    parts = [_load(store_path(p, width), observation_spec, action_spec, gamma) for p in paths]
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def _load(path: Path, observation_spec: dict[str, Spec], action_spec: Spec, gamma: float) -> TensorDict:
    with EpisodeStore(path) as store:
        if store.num_episodes == 0:
            raise ConfigError(f"data={path}: the store holds no episodes")
        wanted = {f"{keys.OBS}/{k}": spec.shape for k, spec in observation_spec.items()}
        wanted |= {k: () for k in REQUIRED[1:]} | {keys.ACTION: action_spec.shape}
        for key, shape in wanted.items():
            if key not in store.keys:
                raise ConfigError(f"data={path}: the store has no {key!r}, which the env and policy need; "
                                  f"its keys: {', '.join(store.keys)}")
            have = store.spec(key)[0]
            if tuple(have) != tuple(shape):
                raise ConfigError(f"data={path}: {key!r} has shape {tuple(have)} per row, the env's spec "
                                  f"{tuple(shape)}: record it with this env (or an env config of the same shapes)")
        episodes = [_episode(store, i, observation_spec, gamma) for i in range(store.num_episodes)]
    return torch.cat([e for e in episodes if e.numel()])


def _episode(store: EpisodeStore, i: int, observation_spec: dict[str, Spec], gamma: float) -> TensorDict:
    start, stop = store.episode_range(i)
    read = lambda key: torch.from_numpy(np.ascontiguousarray(store.read(key, start, stop)))  # noqa: E731
    obs = {k: read(f"{keys.OBS}/{k}") for k in observation_spec}
    terminated = read(keys.TERMINATED).bool()
    truncated = read(keys.TRUNCATED).bool() if keys.TRUNCATED in store.keys else torch.zeros_like(terminated)
    if all(f"{keys.NEXT_OBS}/{k}" in store.keys for k in observation_spec):
        next_obs = {k: read(f"{keys.NEXT_OBS}/{k}") for k in observation_spec}
    else:  # the next row's observation; the last row bootstraps from its own, ended as a time limit would
        next_obs = {k: torch.cat([v[1:], v[-1:]]) for k, v in obs.items()}
        truncated[-1] = ~terminated[-1]
    rows = TensorDict({keys.OBS: TensorDict(obs, [stop - start]).unflatten_keys("/"),
                       keys.NEXT_OBS: TensorDict(next_obs, [stop - start]).unflatten_keys("/"),
                       keys.ACTION: read(keys.ACTION).float(), keys.REWARD: read(keys.REWARD).float(),
                       keys.TERMINATED: terminated, keys.TRUNCATED: truncated},
                      batch_size=[stop - start])  # fmt: skip
    if keys.IS_INTERVENTION in store.keys:
        rows[keys.IS_INTERVENTION] = read(keys.IS_INTERVENTION).bool()
    if "rewound" in store.keys:  # the kept path: a rewind restored the observation its first abandoned row saw
        rows = rows[~read("rewound").bool()]
    if rows.numel():  # return-to-go within the episode (its end stops the sum, however it ended)
        ends = rows[keys.TERMINATED] | rows[keys.TRUNCATED]
        ends[-1] = True
        rows[keys.MC_RETURN] = discounted_returns(rows[keys.REWARD], ends, gamma)
    return rows
