"""Samplers over an EpisodeStore: transitions, n-step windows and action chunks with observation history.

    sampler = WindowSampler(store, WindowSampler.Config(horizon=16, n_obs_steps=2))
    batch = sampler.sample(256, generator)      # TensorDict [256]

A sample starts at a row t of some episode [start, end), drawn uniformly over all rows:
    obs/<k>        [B, *shape] at t, or [B, n_obs_steps, *shape]: rows t-n_obs_steps+1 .. t
    obs_mask       [B, n_obs_steps] bool (only with history): False where the row repeats the first
    action         [B, A] (horizon 1 or chunk_actions=False) or [B, H, A]: rows t .. t+H-1
    reward         [B] (horizon 1) or [B, H]
    mask           [B, H] bool: True for rows inside the episode (a prefix); padding repeats the edge row
    next_obs/<k>   the observation after the last valid row (layout as obs), for bootstrapping
    terminated     [B] the episode terminated inside the window; truncated [B] it was cut off there
    other per-row keys (is_intervention, mc_return, ...) at t; index [B] int64 the store row of t
Actions start at the current step as in LeRobot's `delta_timestamps` / ACT; padding repeats the
edge row with a mask, as diffusion_policy's SequenceSampler does. The observation after an
episode's last row comes from the store's `next_obs/<k>` when it holds them; otherwise it is the
last observation itself (harmless for terminated episodes, whose value is not bootstrapped).

`rows` (optional) picks the store rows to use, in order: an episode is then its picked rows, as if
the others had never been recorded (a correction session's rewound rows; the episodes of a damaged
chunk). Row t of the sampler is store row `rows[t]`. `read_keys` (optional): the store keys read
(default all).
Indices are precomputed per row; keys of vectors are held in memory and gathered by torch
indexing; keys of images and depth maps (rows of 3 dims, which the store chunks a few frames at a
time) are read through the store's chunk cache (each touched chunk once per call), never held.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.data.store import EpisodeStore


@dataclass(frozen=True)
class WindowConfig:
    horizon: int = 1  # action / reward rows per sample: 1 = transitions, n = n-step, H = action chunk
    n_obs_steps: int = 1  # observation rows of history (1 = the current one only)
    chunk_actions: bool = True  # False: only the first action of the window (n-step TD), [B, A]

    def __post_init__(self):
        check(self.horizon >= 1, f"horizon={self.horizon} must be >= 1")
        check(self.n_obs_steps >= 1, f"n_obs_steps={self.n_obs_steps} must be >= 1")


class WindowSampler:
    Config = WindowConfig

    def __init__(self, store: EpisodeStore, config: WindowConfig = WindowConfig(), device: torch.device | str = "cpu",
                 rows: np.ndarray | None = None, read_keys: list[str] | None = None):
        self.store, self.config, self.device = store, config, torch.device(device)
        self._picked = None if rows is None else np.asarray(rows, dtype=np.int64)
        self._keys = list(store.keys if read_keys is None else read_keys)
        self.refresh()

    def refresh(self) -> None:
        """(Re)build the row index and in-memory columns from the store's committed episodes (or `rows`)."""
        store = self.store
        if store.num_episodes == 0:
            raise ValueError(f"episode store {store.path} has no committed episodes to sample from")
        for needed in (keys.ACTION, keys.REWARD):
            if needed not in self._keys:
                raise KeyError(f"WindowSampler needs {needed!r} in the store; it has {store.keys}")
        rows = np.arange(store.num_steps) if self._picked is None else self._picked
        if len(rows) == 0 or np.any(np.diff(rows) <= 0) or rows[0] < 0 or rows[-1] >= store.num_steps:
            raise ValueError(f"WindowSampler rows must be increasing committed rows of {store.path} "
                             f"(0 to {store.num_steps - 1}); got {len(rows)} rows")
        self._rows = torch.from_numpy(rows)
        episode = torch.searchsorted(torch.from_numpy(store.episode_ends), self._rows, right=True)
        lengths = torch.unique_consecutive(episode, return_counts=True)[1]
        ends = torch.cumsum(lengths, 0)
        self._end = torch.repeat_interleave(ends, lengths)  # [N] exclusive end of each row's episode
        self._start = self._end - torch.repeat_interleave(lengths, lengths)
        self._lazy = [k for k in self._keys if len(store.spec(k)[0]) == 3]
        read = (lambda k: store.read(k)) if self._picked is None else (lambda k: store.gather(k, rows))  # noqa: E731
        self._columns = {k: torch.from_numpy(np.ascontiguousarray(read(k))) for k in self._keys if k not in self._lazy}
        self._obs_keys = [k for k in self._keys if k.startswith(keys.OBS + "/")]
        self._next_keys = {k: keys.NEXT_OBS + k[len(keys.OBS):] for k in self._obs_keys}
        self._has_next = all(v in self._keys for v in self._next_keys.values())

    def __len__(self) -> int:
        return len(self._end)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        t = torch.randint(len(self), (batch_size,), generator=generator)
        return self.window(t)

    def window(self, t: torch.Tensor) -> TensorDict:
        """The windows starting at rows `t` (int64 [B]); see the module docstring for the layout."""
        cfg = self.config
        start, end = self._start[t], self._end[t]
        last = end - 1
        steps = t[:, None] + torch.arange(cfg.horizon)
        mask = steps < end[:, None]  # [B, H]
        act_rows = torch.minimum(steps, last[:, None])
        hist = t[:, None] + torch.arange(1 - cfg.n_obs_steps, 1)  # [B, n_obs]
        obs_rows = torch.maximum(hist, start[:, None])
        n_valid = mask.sum(-1)  # rows actually taken
        after = t + n_valid  # the row after the window's last valid one; == end when it ran out
        ran_out = after >= end
        # history of the next observation: obs rows up to `after`, clamped into the episode; with
        # next_obs/<k> in the store its last frame is exact even where the episode ran out
        next_rows = torch.maximum(torch.minimum(after[:, None] + torch.arange(1 - cfg.n_obs_steps, 1), last[:, None]),
                                  start[:, None])
        one = cfg.n_obs_steps == 1
        out: dict[str, torch.Tensor] = {}
        for k in self._obs_keys:
            out[k] = self._take(k, obs_rows[:, 0] if one else obs_rows)
            nxt = self._take(k, next_rows[:, -1] if one else next_rows)
            if self._has_next:
                final = self._take(self._next_keys[k], after - 1)
                nxt = final if one else torch.cat([nxt[:, :-1], final[:, None]], 1)
            out[self._next_keys[k]] = nxt
        scalar = cfg.horizon == 1
        out[keys.ACTION] = self._take(keys.ACTION, act_rows[:, 0] if scalar or not cfg.chunk_actions else act_rows)
        reward = self._take(keys.REWARD, act_rows)
        out[keys.REWARD] = reward[:, 0] if scalar else torch.where(mask, reward, torch.zeros((), dtype=reward.dtype))
        term = self._columns.get(keys.TERMINATED)
        terminated = term[last].bool() & ran_out if term is not None else torch.zeros_like(ran_out)
        out[keys.TERMINATED], out[keys.TRUNCATED] = terminated, ran_out & ~terminated
        if not scalar:
            out[keys.MASK] = mask
        if not one:
            out["obs_mask"] = hist >= start[:, None]
        done = set(self._obs_keys) | set(self._next_keys.values()) | {keys.ACTION, keys.REWARD, keys.TERMINATED,
                                                                      keys.TRUNCATED}
        for k in self._keys:
            if k not in done:
                out[k] = self._take(k, t)
        out["index"] = self._rows[t]
        return TensorDict(out, batch_size=[len(t)]).unflatten_keys("/").to(self.device)

    @property
    def columns(self) -> dict[str, torch.Tensor]:
        """The keys held in memory (all but images), each at every sampler row: {key: [N, *shape]}."""
        return self._columns

    def episode_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, end) int64 [N]: the first and the exclusive end sampler row of each row's episode."""
        return self._start, self._end

    def _take(self, key: str, rows: torch.Tensor) -> torch.Tensor:
        if key in self._columns:
            return self._columns[key][rows]
        return torch.from_numpy(self.store.gather(key, self._rows[rows].numpy()))


def compute_stats(store: EpisodeStore, keys_: list[str] | None = None, rows_per_read: int = 1 << 14) -> dict:
    """Per-key normalization statistics over all committed rows, streamed in blocks.

    Returns {key: {"mean", "std", "min", "max": float64 tensors, "count": rows}}, reduced over rows
    (shape = row shape) for vectors, and over rows and pixels (shape [C]) for images [H, W, C].
    Image statistics are in pixel units (0-255).
    """
    out = {}
    for key in keys_ or store.keys:
        shape, dtype = store.spec(key)
        image = len(shape) == 3
        mean = m2 = lo = hi = None
        count = 0
        for a in range(0, store.num_steps, rows_per_read):
            block = store.read(key, a, a + rows_per_read).astype(np.float64)
            if image:
                block = block.reshape(-1, shape[-1])
            n, b_mean = block.shape[0], block.mean(0)
            b_m2 = np.square(block - b_mean).sum(0)
            if mean is None:
                mean, m2, lo, hi = b_mean, b_m2, block.min(0), block.max(0)
            else:  # Chan et al.'s pairwise merge: no cancellation for large means, unlike sum of squares
                delta, total = b_mean - mean, count + n
                mean = mean + delta * n / total
                m2 = m2 + b_m2 + delta**2 * count * n / total
                lo, hi = np.minimum(lo, block.min(0)), np.maximum(hi, block.max(0))
            count += n
        if count == 0:
            raise ValueError(f"compute_stats: the store {store.path} has no committed rows")
        out[key] = {"mean": torch.as_tensor(mean), "std": torch.as_tensor(np.sqrt(m2 / count)),
                    "min": torch.as_tensor(lo), "max": torch.as_tensor(hi), "count": store.num_steps}
    return out
