"""Training data from episode stores: `data=<store>` (or a list) feeds a pipeline's stages instead of regenerated
scripted demonstrations, streamed from disk.

    source = open_data(["corrections/episodes.zarr"], env.observation_spec, env.action_spec, gamma=0.99,
                       device="cpu", horizon=1)
    len(source)                              # kept rows of all stores
    batch = source.sample(256, generator)    # TensorDict [256], uniform over all kept rows of all stores
    source.interventions()                   # a DataSource over the is_intervention rows only, or None
    source.observations(10_000, generator)   # TensorDict [<= 10_000]: obs/<k> of distinct rows, non-image keys
    source.columns()                         # every row's vector keys (obs, action, reward, ...): normalizers
    source.to_tensordict()                   # every row in memory (small sources: tests)

A batch holds what a ReplayBuffer of transitions holds, so a source stands in for one inside MixedSampler:
    obs/<k>, next_obs/<k>  every key of the env's observation spec, nested as the env's observations
    action float [B, A]; reward float [B]; terminated, truncated bool [B]
    mc_return float [B]   the discounted return-to-go from the row to its episode's end (Cal-QL)
    is_intervention bool [B]  when the store has it
With horizon H > 1 each row is a window (embodied/data/samplers.py, WindowSampler): action [B, H, A], reward
[B, H] (zero past the episode's end), mask [B, H] bool (the steps taken, a prefix), next_obs the observation after
the last step taken, terminated / truncated: the episode ended inside the window; what chunked TD reads
(embodied/algorithms/offpolicy_losses.py, chunked_td_target). mc_return and is_intervention stay those of the
window's first row.

Memory: keys of vectors (state, action, language, ...) are held in memory; camera images and depth maps are read
through each store's chunk cache at sampling time, never loaded whole, so a store far larger than RAM trains.

A source is one of our stores (`embodied correct`, `embodied data import`) or a LeRobot v3 dataset directory
(imported once into a cached store; `observation.state` -> `obs/state`, ...: embodied/data/lerobot_format.py). Rows:
`obs/<key>` for every key of the env's observation spec, `action`, `reward`, `terminated`, optionally `next_obs/<key>`
(else the next row's observation; an episode's last row then ends truncated on its own observation). Rows a rewind
abandoned (`rewound`, correction sessions) are left out: they are not the behaviour anybody chose to keep. A chunk of
the store that fails its checksum is reported (one warning naming the store, the chunk file and its episodes) and
the episodes with rows in it are left out; the rest trains.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import ConfigError
from embodied.data.samplers import WindowConfig, WindowSampler
from embodied.data.store import DamagedDataWarning, EpisodeStore
from embodied.specs import Spec

REQUIRED = (keys.ACTION, keys.REWARD, keys.TERMINATED)  # `truncated` optional: a LeRobot dataset has none
REWOUND = "rewound"


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
        else:
            skipped = EpisodeStore(cached).attrs.get("lerobot_skipped")
            if skipped:  # the import warned once; every later run trains without them too
                warnings.warn(f"data={path}: episodes {skipped} are damaged and left out (imported into {cached})",
                              DamagedDataWarning, stacklevel=2)
        return cached
    if not path.is_dir():
        raise FileNotFoundError(f"data={path}: no episode store or LeRobot dataset there")
    return path


def open_data(paths: list[str | Path], observation_spec: dict[str, Spec], action_spec: Spec, gamma: float,
              device: torch.device | str = "cpu", horizon: int = 1) -> DataSource:
    """The kept rows of every store in `paths` as one source (see the module docstring). Each store is checked
    against the env's specs (one error naming the store, the key, both shapes and the fix)."""
    if not paths:
        raise ConfigError("data=: no store or LeRobot dataset given; pass data=<path> or data=[<path>, ...]")
    language = observation_spec.get(keys.LANGUAGE)
    width = language.shape[0] if language is not None else 128
    config = WindowConfig(horizon=horizon)
    return DataSource([_open(store_path(p, width), observation_spec, action_spec, gamma, config, device)
                       for p in paths])


def load_transitions(paths: list[str | Path], observation_spec: dict[str, Spec], action_spec: Spec,
                     gamma: float) -> TensorDict:
    """Every kept row of every store in `paths` in memory: `open_data(...).to_tensordict()`, for small data."""
    return open_data(paths, observation_spec, action_spec, gamma).to_tensordict()


@dataclass
class _Part:
    """One store: its sampler, the sampler rows a sample may start at, and each row's return-to-go."""

    sampler: WindowSampler
    starts: torch.Tensor  # int64 [S]
    mc_return: torch.Tensor  # float32 [N], over all sampler rows

    def rows(self, t: torch.Tensor) -> TensorDict:
        batch = self.sampler.window(t).exclude("index")
        batch[keys.ACTION], batch[keys.REWARD] = batch[keys.ACTION].float(), batch[keys.REWARD].float()
        batch[keys.MC_RETURN] = self.mc_return[t].to(batch.device)
        if keys.IS_INTERVENTION in batch.keys():
            batch[keys.IS_INTERVENTION] = batch[keys.IS_INTERVENTION].bool()
        return batch


class DataSource:
    """Rows of one or more episode stores, sampled uniformly over all of them (built by `open_data`)."""

    def __init__(self, parts: list[_Part]):
        self.parts = parts
        self._ends = torch.cumsum(torch.tensor([len(p.starts) for p in parts]), 0)  # [stores]

    def __len__(self) -> int:
        return int(self._ends[-1])

    def __repr__(self) -> str:
        return f"DataSource(rows={len(self)}, stores={[str(p.sampler.store.path) for p in self.parts]})"

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """`batch_size` rows drawn uniformly with replacement -> TensorDict [batch_size] (grouped by store)."""
        return self._rows(torch.randint(len(self), (batch_size,), generator=generator))

    def interventions(self) -> DataSource | None:
        """The rows an operator acted (`is_intervention`), each still with its episode's next rows; None if none."""
        parts = []
        for p in self.parts:
            if keys.IS_INTERVENTION in p.sampler.store.keys:
                flagged = p.starts[p.sampler.columns[keys.IS_INTERVENTION][p.starts].bool()]
                if len(flagged):
                    parts.append(_Part(p.sampler, flagged, p.mc_return))
        return DataSource(parts) if parts else None

    def observations(self, max_rows: int, generator: torch.Generator | None = None) -> TensorDict:
        """Up to `max_rows` distinct rows' observations (keys of vectors only; images are not read), e.g. to fit
        an observation normalizer -> TensorDict [min(max_rows, len)] of obs/<k>."""
        index = torch.randperm(len(self), generator=generator)[:max_rows].sort().values
        parts = []
        for p, (lo, hi) in zip(self.parts, self._bounds()):
            t = p.starts[index[(index >= lo) & (index < hi)] - lo]
            obs = {k: v[t] for k, v in p.sampler.columns.items() if k.startswith(keys.OBS + "/")}
            parts.append(TensorDict(obs, batch_size=[len(t)]))
        return torch.cat(parts).unflatten_keys("/")[keys.OBS].to(self.parts[0].sampler.device)

    def columns(self) -> TensorDict:
        """Every row's vector keys (no images are read): obs/<k>, action [len, A] (the row's own), reward,
        terminated, mc_return -> TensorDict [len], e.g. to fit a policy's state and action normalizers on all
        of the data."""
        parts = []
        for p in self.parts:
            t = p.starts
            flat = {k: v[t] for k, v in p.sampler.columns.items()
                    if k.startswith(keys.OBS + "/") or k in (keys.ACTION, keys.REWARD, keys.TERMINATED)}
            flat[keys.ACTION], flat[keys.REWARD] = flat[keys.ACTION].float(), flat[keys.REWARD].float()
            flat[keys.TERMINATED], flat[keys.MC_RETURN] = flat[keys.TERMINATED].bool(), p.mc_return[t]
            parts.append(TensorDict(flat, batch_size=[len(t)]).unflatten_keys("/"))
        return torch.cat(parts).to(self.parts[0].sampler.device)

    def to_tensordict(self) -> TensorDict:
        """Every row as one TensorDict [len] (images included: for small sources)."""
        return self._rows(torch.arange(len(self)))

    def _bounds(self) -> list[tuple[int, int]]:
        ends = self._ends.tolist()
        return list(zip([0] + ends[:-1], ends))

    def _rows(self, index: torch.Tensor) -> TensorDict:
        parts = []
        for p, (lo, hi) in zip(self.parts, self._bounds()):
            mine = index[(index >= lo) & (index < hi)] - lo
            if len(mine):
                parts.append(p.rows(p.starts[mine]))
        return torch.cat(parts) if len(parts) > 1 else parts[0]


def _open(path: Path, observation_spec: dict[str, Spec], action_spec: Spec, gamma: float, config: WindowConfig,
          device: torch.device | str) -> _Part:
    store = EpisodeStore(path)
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
    used = list(wanted)
    next_keys = [f"{keys.NEXT_OBS}/{k}" for k in observation_spec]
    if all(k in store.keys for k in next_keys):
        used += next_keys
    used += [k for k in (keys.IS_INTERVENTION,) if k in store.keys]
    keep = np.ones(store.num_steps, bool)
    for episodes in _damaged_episodes(store, used + [k for k in (REWOUND,) if k in store.keys]):
        keep[store.episode_range(episodes.start)[0] : store.episode_range(episodes.stop - 1)[1]] = False
    rows = np.flatnonzero(keep)
    if REWOUND in store.keys and len(rows):
        rows = rows[~store.gather(REWOUND, rows).astype(bool).reshape(len(rows))]
    if len(rows) == 0:
        raise ConfigError(f"data={path}: no rows are left to train on (every episode is damaged or rewound)")
    sampler = WindowSampler(store, config, device, rows=rows, read_keys=used)
    end = sampler.episode_bounds()[1]
    last = torch.arange(len(rows)) == end - 1
    ends = last | sampler.columns[keys.TERMINATED].bool()
    return _Part(sampler, torch.arange(len(rows)), _returns_to_go(sampler.columns[keys.REWARD], ends, gamma))


def _damaged_episodes(store: EpisodeStore, keys_: list[str]) -> list[range]:
    """The episodes of every chunk of `keys_` that fails its check, each reported by one warning."""
    found = []
    for key in keys_:
        for err in store.damaged_chunks(key):
            warnings.warn(f"{err}: data= leaves out the episodes it holds and trains on the rest",
                          DamagedDataWarning, stacklevel=3)
            found.append(err.episodes)
    return [e for e in found if len(e)]


def _returns_to_go(reward: torch.Tensor, ends: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma (1 - end_t) G_{t+1} over rows [N] -> float32 [N]. A loop over Python floats: the same
    recursion as advantages.discounted_returns, which runs one torch op per row (8.5 s per million rows on one
    core, against 0.5 s here)."""
    out, g = [0.0] * len(reward), 0.0
    for i, (r, end) in enumerate(zip(reward.tolist()[::-1], ends.tolist()[::-1])):
        g = r + (0.0 if end else gamma * g)
        out[i] = g
    return torch.tensor(out[::-1], dtype=torch.float32)
