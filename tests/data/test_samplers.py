"""WindowSampler against a per-sample loop over episodes; compute_stats against numpy."""

from unittest import mock

import numpy as np
import pytest
import torch

from embodied import keys
from embodied.data import MixedSampler, ReplayBuffer
from embodied.data.samplers import WindowSampler, compute_stats
from embodied.data import store as store_module
from embodied.data.store import EpisodeStore
from tests.data.crash_writer import episode


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("samplers") / "s.zarr"
    with mock.patch.object(store_module, "IMAGE_CHUNK_BYTES", 2000), EpisodeStore(path, mode="a") as writer:
        for i in range(12):  # 2 frames per image chunk: windows straddle chunks
            writer.append_episode(episode(i))
    store = EpisodeStore(path, cache_bytes=1 << 14)  # a small cache: evictions happen
    assert store._array("obs/images/cam").chunks[0] == 2
    return store


def reference(store, t, horizon, n_obs):
    """One window, built by looping over the episode that holds row t."""
    e = int(np.searchsorted(store.episode_ends, t, side="right"))
    start, end = store.episode_range(e)
    ep = episode(e)
    i = t - start
    n = end - start
    obs_rows = [max(i + d, 0) for d in range(1 - n_obs, 1)]
    act_rows = [min(i + h, n - 1) for h in range(horizon)]
    valid = [i + h < n for h in range(horizon)]
    after = i + sum(valid)  # may be n: the episode ran out and its last row stands in for the next
    next_rows = [max(min(after + d, n - 1), 0) for d in range(1 - n_obs, 1)]
    return ep, obs_rows, act_rows, valid, next_rows, i + sum(valid) >= n


@pytest.mark.parametrize("horizon, n_obs", [(1, 1), (4, 1), (6, 3)])
def test_windows_match_a_loop_over_episodes(store, horizon, n_obs):
    sampler = WindowSampler(store, WindowSampler.Config(horizon=horizon, n_obs_steps=n_obs))
    assert len(sampler) == store.num_steps
    ends = store.episode_ends
    t = torch.tensor(sorted({0, 1, int(ends[0]) - 1, int(ends[0]), int(ends[-1]) - 1, *range(5, store.num_steps, 7)}))
    batch = sampler.window(t)
    for b, row in enumerate(t.tolist()):
        ep, obs_rows, act_rows, valid, next_rows, ran_out = reference(store, row, horizon, n_obs)
        o, nx = (obs_rows[0], next_rows[0]) if n_obs == 1 else (obs_rows, next_rows)
        for k, name in [("obs/state", ("obs", "state")), ("obs/images/cam", ("obs", "images", "cam"))]:
            assert np.array_equal(batch[name][b].numpy(), ep[k][o]), (row, k)
            assert np.array_equal(batch[("next_obs", *name[1:])][b].numpy(), ep[k][nx]), (row, k)
        a = act_rows[0] if horizon == 1 else act_rows
        assert np.array_equal(batch[keys.ACTION][b].numpy(), ep["action"][a])
        reward = np.where(valid, ep["reward"][act_rows], 0)
        assert np.array_equal(batch[keys.REWARD][b].numpy(), reward[0] if horizon == 1 else reward)
        assert bool(batch[keys.TERMINATED][b]) == (ran_out and bool(ep["terminated"][-1]))
        assert not bool(batch[keys.TRUNCATED][b])  # every episode here ends terminated
        assert bool(batch[keys.IS_INTERVENTION][b]) == bool(ep["is_intervention"][row - store.episode_range(
            int(np.searchsorted(ends, row, side="right")))[0]])
        if horizon > 1:
            assert batch[keys.MASK][b].tolist() == valid
        if n_obs > 1:
            assert batch["obs_mask"][b].tolist() == [r + 1 - n_obs + j >= 0 for j, r in
                                                     enumerate([obs_rows[-1]] * n_obs)]


def test_n_step_first_action_and_sampling(store):
    sampler = WindowSampler(store, WindowSampler.Config(horizon=3, chunk_actions=False))
    batch = sampler.sample(512, torch.Generator().manual_seed(0))
    assert batch[keys.ACTION].shape == (512, 2) and batch[keys.REWARD].shape == (512, 3)
    assert torch.equal(batch[keys.ACTION], torch.from_numpy(store.read("action"))[batch["index"]])
    counts = torch.bincount(batch["index"], minlength=len(sampler))
    assert counts.sum() == 512 and batch["index"].max() < store.num_steps
    # a window sampler mixes with a replay buffer of transitions holding the same keys
    online = ReplayBuffer(100)
    online.extend(WindowSampler(store).sample(50, torch.Generator().manual_seed(1)))
    mixed = MixedSampler({"offline": WindowSampler(store), "online": online}, {"offline": 0.5, "online": 0.5})
    assert mixed.sample(64, torch.Generator().manual_seed(2))["source"].sum() == 32


def test_stored_next_obs_is_used_at_episode_ends(tmp_path):
    with EpisodeStore(tmp_path / "s.zarr", mode="a") as w:
        for i in range(3):
            ep = episode(i)
            state = ep["obs/state"]
            w.append_episode({"obs/state": state, "next_obs/state": state + 0.5, "action": ep["action"],
                              "reward": ep["reward"], "terminated": np.zeros_like(ep["terminated"])})
    sampler = WindowSampler(EpisodeStore(tmp_path / "s.zarr"), WindowSampler.Config(horizon=2))
    last = int(sampler.store.episode_ends[0]) - 1
    batch = sampler.window(torch.tensor([0, last]))
    state = torch.from_numpy(episode(0)["obs/state"])
    assert torch.equal(batch["next_obs", "state"][0], state[1] + 0.5)  # == state[2] - 0.5 ... from next_obs row 1
    assert torch.equal(batch["next_obs", "state"][1], state[-1] + 0.5)
    assert batch[keys.TRUNCATED].tolist() == [False, True] and not batch[keys.TERMINATED].any()


def test_compute_stats_matches_numpy(store):
    stats = compute_stats(store, rows_per_read=7)
    state = store.read("obs/state").astype(np.float64)
    assert np.allclose(stats["obs/state"]["mean"], state.mean(0)) and np.allclose(stats["obs/state"]["std"], state.std(0))
    assert np.array_equal(stats["obs/state"]["min"], state.min(0)) and np.array_equal(stats["obs/state"]["max"], state.max(0))
    img = store.read("obs/images/cam").reshape(-1, 3).astype(np.float64)
    assert stats["obs/images/cam"]["mean"].shape == (3,)
    assert np.allclose(stats["obs/images/cam"]["mean"], img.mean(0)) and np.allclose(stats["obs/images/cam"]["std"], img.std(0))
    assert stats["action"]["count"] == store.num_steps


def test_errors(tmp_path):
    with EpisodeStore(tmp_path / "s.zarr", mode="a") as w:
        with pytest.raises(ValueError, match="no committed episodes"):
            WindowSampler(w)
        w.append_episode({"obs/state": np.zeros((3, 2), np.float32), "action": np.zeros((3, 1), np.float32)})
        with pytest.raises(KeyError, match="'reward'"):
            WindowSampler(w)
    with pytest.raises(ValueError, match="horizon=0"):
        WindowSampler.Config(horizon=0)
