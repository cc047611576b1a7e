"""In-memory replay: a ring buffer of transitions and a fixed-fraction mixed sampler.

    buffer = ReplayBuffer(capacity=1_000_000, device="cpu")
    buffer.extend(transitions)              # TensorDict [B]; keys fixed by the first batch
    batch = buffer.sample(256, generator)   # TensorDict [256], uniform with replacement

    windows = ReplayWindows(buffer, horizon=4, num_envs=N)   # chunks of 4 consecutive steps of each env
    mixed = MixedSampler({"offline": demos, "online": buffer}, {"offline": 0.5, "online": 0.5})
    batch = mixed.sample(256, generator)    # 128 rows from each; batch["source"] int64 [256]

A transition row holds (shapes per row; B rows in a batch):
    obs/<k>, next_obs/<k>   e.g. obs/state float [D], obs/images/<cam> uint8 [H, W, 3]
    action float [A] (or a chunk [H, A]), reward float [], terminated bool [],
    truncated bool [], optionally is_intervention bool [], mc_return float [], ...
`transitions_from_rollout` turns a Collector rollout [T, N] into such rows.
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict

from embodied import keys

SOURCE = "source"  # int64 [B]: index into MixedSampler.names of the source each row came from


def _flat(td: TensorDict) -> dict[str, torch.Tensor]:
    return dict(td.flatten_keys("/").items())


class ReplayBuffer:
    """A ring buffer of TensorDict rows; the oldest rows are overwritten once full."""

    def __init__(self, capacity: int, device: torch.device | str = "cpu"):
        if capacity < 1:
            raise ValueError(f"ReplayBuffer capacity={capacity} must be >= 1")
        self.capacity, self.device = int(capacity), torch.device(device)
        self._storage: TensorDict | None = None  # [capacity], allocated from the first batch
        self._cursor = 0  # next row to write
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"ReplayBuffer(size={self._size}, capacity={self.capacity}, device={self.device})"

    @property
    def keys(self) -> list[str]:
        """The flat ('/'-joined) keys stored, empty before the first `extend`."""
        return [] if self._storage is None else sorted(_flat(self._storage))

    def extend(self, batch: TensorDict) -> None:
        """Append rows (batch_size [B]); every batch must carry the first batch's keys, shapes and dtypes."""
        if batch.batch_dims != 1:
            raise ValueError(f"ReplayBuffer.extend wants a TensorDict with batch_size [B], got {list(batch.batch_size)}")
        n = batch.batch_size[0]
        if n == 0:
            return
        batch = batch.to(self.device)
        if self._storage is None:
            self._storage = self._allocate(batch)
        else:
            self._check_layout(batch)
        if n > self.capacity:  # only the newest `capacity` rows survive anyway
            batch, n = batch[n - self.capacity :], self.capacity
        index = (self._cursor + torch.arange(n, device=self.device)) % self.capacity
        self._storage[index] = batch
        self._cursor = (self._cursor + n) % self.capacity
        self._size = min(self._size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """`batch_size` rows drawn uniformly with replacement -> TensorDict [batch_size] on `device`."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty ReplayBuffer; extend it first")
        index = torch.randint(self._size, (batch_size,), generator=generator)
        return self._storage[index.to(self.device)]

    def _allocate(self, batch: TensorDict) -> TensorDict:
        flat = {k: torch.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype, device=self.device)
                for k, v in _flat(batch).items()}
        return TensorDict(flat, batch_size=[self.capacity], device=self.device).unflatten_keys("/")

    def _check_layout(self, batch: TensorDict) -> None:
        have, got = _flat(self._storage), _flat(batch)
        if set(have) != set(got):
            missing, extra = sorted(set(have) - set(got)), sorted(set(got) - set(have))
            raise KeyError(f"ReplayBuffer.extend: batch keys differ from the stored ones (missing {missing}, "
                           f"unexpected {extra}); stored keys: {sorted(have)}")
        for k, v in got.items():
            if v.shape[1:] != have[k].shape[1:] or v.dtype != have[k].dtype:
                raise ValueError(f"ReplayBuffer.extend: {k!r} is {v.dtype} {list(v.shape[1:])} per row, "
                                 f"the buffer stores {have[k].dtype} {list(have[k].shape[1:])}")

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The stored rows in insertion order (oldest first), as flat CPU tensors `data/<key>`."""
        state = {"capacity": torch.tensor(self.capacity), "size": torch.tensor(self._size)}
        if self._storage is not None:
            order = (self._cursor - self._size + torch.arange(self._size)) % self.capacity
            state.update({f"data/{k}": v[order.to(self.device)].cpu() for k, v in _flat(self._storage).items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if int(state["capacity"]) != self.capacity:
            raise ValueError(f"state was saved from a ReplayBuffer of capacity {int(state['capacity'])}, "
                             f"this one has capacity {self.capacity}")
        self._storage, self._cursor, self._size = None, 0, 0
        data = {k[len("data/"):]: v for k, v in state.items() if k.startswith("data/")}
        if data and int(state["size"]) > 0:
            self.extend(TensorDict(data, batch_size=[int(state["size"])]).unflatten_keys("/"))


class ReplayWindows:
    """Windows of `horizon` consecutive steps of one env, from a buffer filled one row per env per step (row
    t * N + n is env n's step t, as `transitions_from_rollout` orders a [T, N] rollout): what chunked TD trains an
    action-chunk critic on online, laid out as the window sampler gives a store's windows (embodied/data/samplers.py):
        obs/<k>     [B, ...] at the window's first step; other per-row keys (is_intervention, ...) there too
        action      [B, H, A]: the actions taken, padding repeats the last one taken
        reward      [B, H], zero past the last step taken; mask [B, H] bool, the steps taken (a prefix)
        next_obs/<k>, terminated, truncated   those of the last step taken
    A window stops at the step where its episode ended and at the newest row stored. Needs every env step stored
    (a same-step auto-resetting env: rows dropped for a next-step autoreset would shift the stride)."""

    def __init__(self, buffer: ReplayBuffer, horizon: int, num_envs: int):
        if horizon < 1 or num_envs < 1:
            raise ValueError(f"ReplayWindows: horizon={horizon} and num_envs={num_envs} must be >= 1")
        self.buffer, self.horizon, self.num_envs = buffer, horizon, num_envs

    def __len__(self) -> int:
        return len(self.buffer)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        buffer = self.buffer
        if len(buffer) == 0:
            raise ValueError("cannot sample from an empty ReplayBuffer; extend it first")
        size, device = len(buffer), buffer.device
        first = torch.randint(size, (batch_size,), generator=generator)  # by age: 0 = the oldest row kept
        age = first[:, None] + torch.arange(self.horizon) * self.num_envs  # [B, H]
        stored = age < size
        rows = buffer._storage[((buffer._cursor - size + age.clamp(max=size - 1)) % buffer.capacity).to(device)]
        ended = (rows[keys.TERMINATED] | rows[keys.TRUNCATED]).to(device)
        # a step is taken when it is stored and no earlier step of the window ended its episode
        before = torch.cumsum(ended.long(), 1) - ended.long()
        mask = stored.to(device) & (before == 0)
        last = mask.sum(1) - 1  # [B] the last step taken (the first is always taken)
        take = torch.minimum(torch.arange(self.horizon, device=device)[None], last[:, None])
        arange = torch.arange(batch_size, device=device)
        out = rows[:, 0].clone()
        out[keys.ACTION] = rows[keys.ACTION].gather(1, take.view(*take.shape, *[1] * (rows[keys.ACTION].dim() - 2))
                                                    .expand_as(rows[keys.ACTION]))
        out[keys.REWARD] = torch.where(mask, rows[keys.REWARD], torch.zeros((), dtype=rows[keys.REWARD].dtype))
        out[keys.MASK] = mask
        at_last = rows[arange, last]
        out[keys.NEXT_OBS] = at_last[keys.NEXT_OBS]
        out[keys.TERMINATED], out[keys.TRUNCATED] = at_last[keys.TERMINATED], at_last[keys.TRUNCATED]
        return out


class MixedSampler:
    """Draws a fixed number of rows from each source per batch (RLPD's symmetric sampling, Ball et al. 2023).

    `sources` maps a name to anything with `sample(n, generator) -> TensorDict [n]` and `__len__`
    (a ReplayBuffer, an episode-store sampler). Counts are `fraction * batch_size` rounded by the
    largest-remainder rule, so they always sum to `batch_size`. Rows come out grouped by source in
    the order of `sources`; `batch["source"]` holds each row's index into `names`.
    """

    def __init__(self, sources: dict[str, object], fractions: dict[str, float]):
        if not sources:
            raise ValueError("MixedSampler needs at least one source")
        if set(sources) != set(fractions):
            raise ValueError(f"MixedSampler: fractions are given for {sorted(fractions)} but the sources are "
                             f"{sorted(sources)}; give exactly one fraction per source")
        for name, f in fractions.items():
            if not (0.0 <= f <= 1.0) or not math.isfinite(f):
                raise ValueError(f"MixedSampler: fraction for {name!r} is {f}; it must be in [0, 1]")
        total = sum(fractions.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"MixedSampler: fractions {fractions} sum to {total}, they must sum to 1")
        self.names = list(sources)
        self.sources, self.fractions = sources, {n: float(fractions[n]) for n in self.names}

    def counts(self, batch_size: int) -> dict[str, int]:
        """Rows per source for a batch of `batch_size` (largest remainder; ties go to the earlier source)."""
        exact = [self.fractions[n] * batch_size for n in self.names]
        counts = [math.floor(x) for x in exact]
        by_remainder = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
        for i in by_remainder[: batch_size - sum(counts)]:
            counts[i] += 1
        return dict(zip(self.names, counts))

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        parts = []
        for i, (name, n) in enumerate(self.counts(batch_size).items()):
            if n == 0:
                continue
            if len(self.sources[name]) == 0:
                raise ValueError(f"MixedSampler: source {name!r} is empty but its fraction "
                                 f"{self.fractions[name]} asks for {n} of {batch_size} rows")
            part = self.sources[name].sample(n, generator)
            part[SOURCE] = torch.full((n,), i, dtype=torch.int64, device=part.device)
            parts.append(part)
        layouts = [sorted(_flat(p)) for p in parts]
        for p, layout in zip(parts[1:], layouts[1:]):
            if layout != layouts[0]:
                raise KeyError(f"MixedSampler: sources yield different keys: {layouts[0]} vs {layout}")
        return torch.cat(parts) if len(parts) > 1 else parts[0]


def transitions_from_rollout(rollout: TensorDict) -> TensorDict:
    """A time-major Collector rollout [T, N] -> flat transitions [T * N] (row t * N + n).

    Needs `next_obs`: a Collector built with `keep_next_obs=True` stores there the observation each
    action led to, the env's `final_obs` where the episode ended (auto-reset replaced the returned one).
    Kept: obs, next_obs, action, reward, terminated, truncated, and is_intervention / success / mc_return
    when present; on-policy entries (log_prob, value, next_value) are dropped, and so are the steps
    whose `mask` is False (next-step autoreset: the action only reset the env).
    """
    if rollout.batch_dims != 2:
        raise ValueError(f"transitions_from_rollout wants a time-major rollout [T, N], got {list(rollout.batch_size)}")
    if keys.NEXT_OBS not in rollout.keys():
        raise KeyError("transitions_from_rollout: the rollout has no 'next_obs'; collect it with "
                       "Collector(env, policy, steps, keep_next_obs=True)")
    wanted = [keys.OBS, keys.NEXT_OBS, keys.ACTION, keys.REWARD, keys.TERMINATED, keys.TRUNCATED]
    missing = [k for k in wanted if k not in rollout.keys()]
    if missing:
        raise KeyError(f"transitions_from_rollout: rollout lacks {missing}; it has {sorted(rollout.keys())}")
    optional = [k for k in (keys.IS_INTERVENTION, keys.SUCCESS, keys.MC_RETURN) if k in rollout.keys()]
    flat = rollout.select(*wanted, *optional).reshape(-1)
    if keys.MASK in rollout.keys():
        flat = flat[rollout[keys.MASK].reshape(-1)]
    return flat
