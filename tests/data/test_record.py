"""`embodied record`: a scripted expert's or a trained policy's episodes into a store that data= trains from."""

import torch

from embodied import keys, registry
from embodied.cli import record_cmd
from embodied.data.sources import load_transitions
from embodied.data.store import EpisodeStore
from embodied.runner import checkpoint


def test_scripted_operator_records_whole_episodes(tmp_path, capsys):
    store = tmp_path / "demos.zarr"
    assert record_cmd(["env=arm_reach", "--operator", "scripted", "--episodes", "10", "--num-envs", "4",
                       "--store", str(store)]) == 0  # fmt: skip
    assert record_cmd(["env=arm_reach", "--operator", "scripted", "--episodes", "3", "--store", str(store),
                       "--seed", "7"]) == 0  # appends  # fmt: skip
    reader = EpisodeStore(store)
    assert reader.num_episodes == 13
    for i in range(13):  # one episode each: it ends at its only done step
        episode = reader.episode(i)
        done = episode[keys.TERMINATED] | episode[keys.TRUNCATED]
        assert bool(done[-1]) and not bool(done[:-1].any())
    assert float(torch.stack([reader.episode(i)[keys.SUCCESS][-1] for i in range(13)]).float().mean()) > 0.9
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    rows = load_transitions([store], env.observation_spec, env.action_spec, 0.99)
    assert rows.numel() == reader.num_steps
    assert '"episodes": 3' in capsys.readouterr().out


def test_a_policy_records_its_own_actions(tmp_path):
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    policy = registry.build("policy", "mlp", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)
    config = {"name": "rec", "device": "cpu", "threads": 1, "env": {"name": "arm_reach"}, "policy": {"name": "mlp"}}
    checkpoint.save_checkpoint(tmp_path / "ckpt", policy.state_dict(), {}, config)
    store = tmp_path / "policy.zarr"
    assert record_cmd(["--policy", str(tmp_path / "ckpt"), "--episodes", "2", "--store", str(store)]) == 0
    episode = EpisodeStore(store).episode(0)
    obs = episode[keys.OBS][:5]
    torch.testing.assert_close(episode[keys.ACTION][:5], policy.act(obs, deterministic=True).action)


def test_bad_requests_are_one_line_errors(tmp_path, capsys):
    store = str(tmp_path / "x.zarr")
    assert record_cmd(["env=arm_reach", "--episodes", "2", "--store", store]) == 1
    assert "--operator scripted or --policy" in capsys.readouterr().err
    assert record_cmd(["env=isaacgym", "--operator", "scripted", "--store", store]) == 1
    assert "has no scripted expert; envs with one: arm_reach" in capsys.readouterr().err
    assert record_cmd(["--policy", str(tmp_path / "nope"), "--store", store]) == 1
    assert "no checkpoint" in capsys.readouterr().err
