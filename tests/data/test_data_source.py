"""open_data: stores streamed as training rows (embodied/data/sources.py), checked against a loop over the episodes'
kept rows; damaged chunks leave out their episodes; images are read through the store, never held."""

from unittest import mock

import numpy as np
import pytest
import torch

from embodied import keys
from embodied.algorithms.offpolicy_losses import chunked_td_target
from embodied.config import ConfigError
from embodied.data import store as store_module
from embodied.data.sources import open_data
from embodied.data.store import DamagedDataWarning, EpisodeStore
from embodied.specs import Spec
from tests.data.crash_writer import episode

OBS_SPEC = {"state": Spec((4,)), "images/cam": Spec((16, 16, 3), torch.uint8), "language": Spec((24,), torch.uint8)}
ACTION_SPEC = Spec((2,))
GAMMA = 0.9
KEYS = {("obs", "state"), ("obs", "images", "cam"), ("obs", "language"), ("next_obs", "state"),
        ("next_obs", "images", "cam"), ("next_obs", "language"), keys.ACTION, keys.REWARD, keys.TERMINATED,
        keys.TRUNCATED, keys.MC_RETURN, keys.IS_INTERVENTION}


def rewound_episode(i):
    """crash_writer's episode i; in episodes of 6 rows or more a rewind abandoned rows 2-3, and every
    other episode ends cut off (not terminated)."""
    ep = episode(i)
    n = len(ep["reward"])
    ep["rewound"] = (np.arange(n) >= 2) & (np.arange(n) < 4) & (n >= 6)
    ep["terminated"] = ep["terminated"] & (i % 2 == 0)
    return ep


def write(path, episodes, first=0):
    with EpisodeStore(path, mode="a") as store:
        for i in range(first, first + episodes):
            store.append_episode(rewound_episode(i))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return write(tmp_path_factory.mktemp("source") / "s.zarr", 10)


def kept(i):
    """The kept rows of episode i, in order."""
    return np.flatnonzero(~rewound_episode(i)["rewound"])


def reference(i, pos, horizon):
    """The window at kept position `pos` of episode i, built by hand."""
    ep, rows = rewound_episode(i), kept(i)
    steps = [rows[min(pos + h, len(rows) - 1)] for h in range(horizon)]
    mask = [pos + h < len(rows) for h in range(horizon)]
    taken = sum(mask)
    ran_out = pos + taken >= len(rows)
    after = rows[min(pos + taken, len(rows) - 1)]
    terminated = ran_out and bool(ep["terminated"][rows[-1]])
    rewards = ep["reward"][rows]
    ret = sum(GAMMA**j * r for j, r in enumerate(rewards[pos:]))  # return-to-go along the kept rows
    return {"obs": rows[pos], "next": after, "action": ep["action"][steps],
            "reward": np.where(mask, ep["reward"][steps], 0), "mask": mask, "terminated": terminated,
            "truncated": ran_out and not terminated, "mc_return": ret,
            "is_intervention": bool(ep["is_intervention"][rows[pos]])}


def identify(batch):
    """(episode, kept position) of each row, from its state (crash_writer: state[0] = 1000 i + t)."""
    out = []
    for s in batch["obs", "state"][:, 0].tolist():
        i, t = divmod(int(s), 1000)
        assert t in kept(i), f"row {t} of episode {i} was rewound"
        out.append((i, int(np.flatnonzero(kept(i) == t)[0])))
    return out


def check_rows(batch, horizon):
    ids = identify(batch)
    for b, (i, pos) in enumerate(ids):
        ref, ep = reference(i, pos, horizon), rewound_episode(i)
        for name, k in [(("obs", "state"), "obs/state"), (("obs", "images", "cam"), "obs/images/cam"),
                        (("obs", "language"), "obs/language")]:
            assert np.array_equal(batch[name][b].numpy(), ep[k][ref["obs"]]), (i, pos, k)
            assert np.array_equal(batch[("next_obs", *name[1:])][b].numpy(), ep[k][ref["next"]]), (i, pos, k)
        action, reward = (ref["action"][0], ref["reward"][0]) if horizon == 1 else (ref["action"], ref["reward"])
        assert np.array_equal(batch[keys.ACTION][b].numpy(), action)
        assert np.allclose(batch[keys.REWARD][b].numpy(), reward)
        assert bool(batch[keys.TERMINATED][b]) == ref["terminated"]
        assert bool(batch[keys.TRUNCATED][b]) == ref["truncated"]
        assert float(batch[keys.MC_RETURN][b]) == pytest.approx(ref["mc_return"], rel=1e-6)
        assert bool(batch[keys.IS_INTERVENTION][b]) == ref["is_intervention"]
        if horizon > 1:
            assert batch[keys.MASK][b].tolist() == ref["mask"]
    return ids


def test_rows_are_the_kept_transitions_of_every_episode(store):
    source = open_data([store], OBS_SPEC, ACTION_SPEC, GAMMA)
    assert len(source) == sum(len(kept(i)) for i in range(10)) < EpisodeStore(store).num_steps
    rows = source.to_tensordict()
    assert set(rows.keys(include_nested=True, leaves_only=True)) == KEYS
    assert rows[keys.ACTION].dtype == rows[keys.REWARD].dtype == rows[keys.MC_RETURN].dtype == torch.float32
    assert rows[keys.TERMINATED].dtype == rows[keys.IS_INTERVENTION].dtype == torch.bool
    ids = check_rows(rows, 1)
    assert ids == [(i, pos) for i in range(10) for pos in range(len(kept(i)))]
    batch = source.sample(300, torch.Generator().manual_seed(0))  # the layout a ReplayBuffer of transitions samples
    assert batch.batch_size == (300,) and set(batch.keys(include_nested=True, leaves_only=True)) == KEYS
    check_rows(batch, 1)


def test_windows_are_what_chunked_td_reads(store):
    source = open_data([store], OBS_SPEC, ACTION_SPEC, GAMMA, horizon=4)
    batch = source.sample(400, torch.Generator().manual_seed(1))
    assert batch[keys.ACTION].shape == (400, 4, 2) and batch[keys.REWARD].shape == batch[keys.MASK].shape == (400, 4)
    assert batch[keys.TERMINATED].shape == (400,) and batch["next_obs", "state"].shape == (400, 4)
    ids = check_rows(batch, 4)
    assert not batch[keys.MASK].all() and batch[keys.TERMINATED].any() and batch[keys.TRUNCATED].any()
    # the chunked TD target on these windows, with V(s) = s[0], against the sum written out
    value = batch["next_obs", "state"][:, 0]
    target = chunked_td_target(batch[keys.REWARD], batch[keys.MASK], batch[keys.TERMINATED], value, GAMMA)
    for b, (i, pos) in enumerate(ids[:50]):
        ref, ep = reference(i, pos, 4), rewound_episode(i)
        h = sum(ref["mask"])
        want = sum(GAMMA**j * ref["reward"][j] for j in range(h))
        want += GAMMA**h * (not ref["terminated"]) * ep["obs/state"][ref["next"], 0]
        assert float(target[b]) == pytest.approx(want, rel=1e-5)


def test_interventions_are_only_flagged_rows(store, tmp_path):
    source = open_data([store], OBS_SPEC, ACTION_SPEC, GAMMA)
    flagged = source.interventions()
    want = sum(int(rewound_episode(i)["is_intervention"][kept(i)].sum()) for i in range(10))
    assert len(flagged) == want < len(source)
    batch = flagged.sample(300, torch.Generator().manual_seed(2))
    assert batch[keys.IS_INTERVENTION].all()
    check_rows(batch, 1)  # next_obs still the episode's next kept row, flagged or not
    with EpisodeStore(tmp_path / "none.zarr", mode="a") as w:
        w.append_episode({**episode(0), "is_intervention": np.zeros(3, bool)})
    assert open_data([tmp_path / "none.zarr"], OBS_SPEC, ACTION_SPEC, GAMMA).interventions() is None


def test_several_stores_are_sampled_as_one(store, tmp_path):
    other = write(tmp_path / "other.zarr", 3, first=20)
    source = open_data([store, other], OBS_SPEC, ACTION_SPEC, GAMMA)
    sizes = [sum(len(kept(i)) for i in range(10)), sum(len(kept(i)) for i in range(20, 23))]
    assert len(source) == sum(sizes)
    ids = check_rows(source.sample(2000, torch.Generator().manual_seed(3)), 1)
    from_other = sum(i >= 20 for i, _ in ids)
    assert abs(from_other - 2000 * sizes[1] / sum(sizes)) < 4 * (2000 * 0.25) ** 0.5  # uniform over all rows
    assert [i for i, _ in identify(source.to_tensordict())] == [i for i in [*range(10), 20, 21, 22] for _ in kept(i)]


def test_observations_are_distinct_rows_without_images(store):
    source = open_data([store], OBS_SPEC, ACTION_SPEC, GAMMA)
    obs = source.observations(25, torch.Generator().manual_seed(4))
    assert set(obs.keys()) == {"state", "language"} and obs.batch_size == (25,)
    assert len({tuple(s) for s in obs["state"].tolist()}) == 25
    assert source.observations(10**6).batch_size == (len(source),)


def test_images_are_read_through_the_store_not_held(store):
    reads, gathers = [], []
    read, gather = EpisodeStore.read, EpisodeStore.gather
    spy_read = lambda self, key, *a: reads.append(key) or read(self, key, *a)  # noqa: E731
    spy_gather = lambda self, key, i: gathers.append((key, i)) or gather(self, key, i)  # noqa: E731
    with mock.patch.object(EpisodeStore, "read", spy_read), mock.patch.object(EpisodeStore, "gather", spy_gather):
        source = open_data([store], OBS_SPEC, ACTION_SPEC, GAMMA)
        assert not [k for k in reads if "images" in k] and not [k for k, _ in gathers if "images" in k]
        batch = source.sample(8, torch.Generator().manual_seed(5))
    images = [i for k, i in gathers if k == "obs/images/cam"]
    assert [len(i) for i in images] == [8, 8]  # the 8 sampled rows, then the rows after them (next_obs)
    check_rows(batch, 1)
    assert "obs/images/cam" not in source.parts[0].sampler.columns


def test_a_spec_mismatch_names_store_key_and_both_shapes(store, tmp_path):
    with pytest.raises(ConfigError, match=r"s.zarr: 'obs/state' has shape \(4,\) per row, the env's spec \(5,\)"):
        open_data([store], {**OBS_SPEC, "state": Spec((5,))}, ACTION_SPEC, GAMMA)
    with pytest.raises(ConfigError, match=r"the store has no 'obs/privileged'"):
        open_data([store], {**OBS_SPEC, "privileged": Spec((3,))}, ACTION_SPEC, GAMMA)
    EpisodeStore(tmp_path / "empty.zarr", mode="a").close()
    with pytest.raises(ConfigError, match="the store holds no episodes"):
        open_data([tmp_path / "empty.zarr"], OBS_SPEC, ACTION_SPEC, GAMMA)


@pytest.fixture
def small_chunks(tmp_path):
    """8 episodes; obs/state chunks of 4 rows, image chunks of 2 frames. Episodes end at rows 3, 13, 30, 40, ..."""
    with mock.patch.object(store_module, "CHUNK_BYTES", 64), mock.patch.object(store_module, "IMAGE_CHUNK_BYTES", 2000):
        write(tmp_path / "s.zarr", 8)
    return tmp_path / "s.zarr"


@pytest.mark.parametrize("chunk, lost", [("data/obs/state/c/3/0", [1, 2]),  # rows 12-15
                                         ("data/obs/images/cam/c/1/0/0/0", [0, 1])])  # rows 2-3
def test_a_damaged_chunk_leaves_out_its_episodes(small_chunks, chunk, lost):
    path = small_chunks / chunk
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.warns(DamagedDataWarning) as caught:
        source = open_data([small_chunks], OBS_SPEC, ACTION_SPEC, GAMMA)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"{small_chunks}: data/" in message and f"({'episodes %d-%d' % tuple(lost)})" in message
    assert f"the file {path} is damaged" in message
    left = [i for i in range(8) if i not in lost]
    assert len(source) == sum(len(kept(i)) for i in left)
    ids = check_rows(source.to_tensordict(), 1)
    assert sorted({i for i, _ in ids}) == left
    check_rows(source.sample(200, torch.Generator().manual_seed(6)), 1)


def test_a_store_with_every_episode_damaged_is_an_error(tmp_path):
    write(tmp_path / "s.zarr", 2)
    for chunk in (tmp_path / "s.zarr" / "data/obs/state").rglob("*"):
        if chunk.is_file() and chunk.name != "zarr.json":
            chunk.write_bytes(chunk.read_bytes()[:-3])
    with pytest.warns(DamagedDataWarning), pytest.raises(ConfigError, match="no rows are left to train on"):
        open_data([tmp_path / "s.zarr"], OBS_SPEC, ACTION_SPEC, GAMMA)
