"""`embodied record`: a scripted expert's, a trained policy's or a teleop device's episodes into a store that
data= trains from."""

import numpy as np
import pytest
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
    assert "give one of --operator scripted, --policy <run> or --teleop <device>" in capsys.readouterr().err
    assert record_cmd(["env=gym", "env.id=Pendulum-v1", "--operator", "scripted", "--episodes", "1", "--store", store]) == 1
    assert "GymEnv has no scripted expert (an `expert_action` method)" in capsys.readouterr().err
    assert record_cmd(["--policy", str(tmp_path / "nope"), "--store", store]) == 1
    assert "no checkpoint" in capsys.readouterr().err


def _whole_episodes(reader: EpisodeStore) -> None:
    """Every stored episode ends at its only done row (terminated or truncated)."""
    for i in range(reader.num_episodes):
        episode = reader.episode(i)
        done = episode[keys.TERMINATED] | episode[keys.TRUNCATED]
        assert bool(done[-1]) and not bool(done[:-1].any()), i


def test_the_scripted_teleop_device_records_a_camera_env_with_language(tmp_path, capsys):
    """--teleop scripted on MuJoCo reach with a camera: the device drives every step; frames, instructions, labels."""
    pytest.importorskip("mujoco")
    store = tmp_path / "teleop.zarr"
    assert record_cmd(["env=mujoco_reach", "env.cameras=[front]", "env.image_size=32", "--teleop", "scripted",
                       "--episodes", "3", "--store", str(store)]) == 0  # fmt: skip
    assert '"teleop": "scripted", "episodes": 3' in capsys.readouterr().out
    reader = EpisodeStore(store)
    assert reader.num_episodes == 3
    _whole_episodes(reader)
    env = registry.build("env", "mujoco_reach", {"cameras": ("front",), "image_size": 32}, num_envs=1)
    for key, spec in env.observation_spec.items():  # state, language, images/front: as the env gives them
        for side in (keys.OBS, keys.NEXT_OBS):
            dtype = np.dtype(str(spec.dtype).removeprefix("torch."))
            assert reader.spec(f"{side}/{key}") == (tuple(spec.shape), dtype), key
    episode = reader.episode(0)
    assert bool(episode[keys.IS_INTERVENTION].all())
    assert bool(episode[keys.OBS]["language"].any()) and bool(episode[keys.OBS]["images"]["front"].any())
    # the sim's outcome labels each episode; its expert reaches the ball within the time limit
    assert all(int(reader.episode(i)["label"][0]) == 1 for i in range(3))
    rows = load_transitions([store], env.observation_spec, env.action_spec, 0.99)
    assert rows.numel() == reader.num_steps


def test_the_scripted_teleop_device_records_a_robot_through_its_safety_layer(tmp_path, monkeypatch):
    """robot=sim_arm: the scripted operator reads the twin (arm_reach), every command goes through the arm's safety
    layer; a robot knows no success, so the episodes are unlabelled and run to --steps (unless a failsafe ends one)."""
    from real_robot.arms.sim_arm import SimulatedArm

    sent = []
    checked = SimulatedArm.send_action  # the safety layer's entry point (drivers cannot override it)

    def counted(self, action, **kwargs):
        sent.append(action)
        return checked(self, action, **kwargs)

    monkeypatch.setattr(SimulatedArm, "send_action", counted)
    store = tmp_path / "robot.zarr"
    code = record_cmd(["env=arm_reach", "robot=sim_arm", "robot.control_hz=10", "robot.physics_hz=20", "--hz", "10",
                       "--teleop", "scripted", "--episodes", "2", "--steps", "8", "--store", str(store)])  # fmt: skip
    assert code == 0
    reader = EpisodeStore(store)
    assert reader.num_episodes == 2 and len(sent) == reader.num_steps
    _whole_episodes(reader)
    assert 2 <= reader.num_steps <= 16
    env = registry.build("env", "arm_reach", {}, num_envs=1)
    episode = reader.episode(0)
    assert episode[keys.OBS][keys.STATE].shape[1:] == env.observation_spec[keys.STATE].shape
    assert episode[keys.ACTION].shape[1:] == env.action_spec.shape and bool(episode[keys.IS_INTERVENTION].all())
    assert set(episode["label"].tolist()) == {-1}
    assert bool(episode[keys.ACTION].abs().sum() > 0)  # the expert moved the arm


def test_a_keyboard_labels_the_episode_it_drives(tmp_path):
    """Keys waiting for the keyboard (a pipe: no terminal mode to set, so nothing flushes them): `a` takes over and
    drives action dimension 0 (+1), `y` labels the episode a success: it ends on that step, terminated with reward 1
    (as in a correction session)."""
    import os

    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"ay")
        store = tmp_path / "keys.zarr"
        code = record_cmd(["env=arm_reach", f"teleop.fd={read_end}", "--teleop", "keyboard", "--hz", "1000",
                           "--episodes", "1", "--store", str(store)])  # fmt: skip
    finally:
        os.close(read_end)
        os.close(write_end)
    assert code == 0
    episode = EpisodeStore(store).episode(0)
    assert len(episode[keys.ACTION]) == 1 and float(episode[keys.ACTION][0, 0]) == 1.0
    assert bool(episode[keys.IS_INTERVENTION][0]) and int(episode["label"][0]) == 1
    assert float(episode[keys.REWARD][0]) == 1.0 and bool(episode[keys.TERMINATED][0])


@pytest.mark.parametrize("device", ["gamepad", "spacemouse"])
def test_a_missing_device_library_is_one_line_naming_device_and_install(device, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "hid", None)  # hidapi absent, whether or not this machine has it
    store = tmp_path / "x.zarr"
    assert record_cmd(["env=arm_reach", "--teleop", device, "--episodes", "1", "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: teleop={device}: ") and "pip install" in err
    assert "hidapi" in err and not store.exists()


def test_bad_teleop_requests_are_one_line_errors(tmp_path, capsys):
    store = str(tmp_path / "x.zarr")
    assert record_cmd(["env=arm_reach", "--operator", "scripted", "--teleop", "scripted", "--store", store]) == 1
    assert "give one of --operator scripted, --policy <run> or --teleop <device>" in capsys.readouterr().err
    assert record_cmd(["robot=sim_arm", "--teleop", "scripted", "--store", store]) == 1
    assert "--teleop needs env=<name>" in capsys.readouterr().err
    assert record_cmd(["env=arm_reach", "--teleop", "joystick", "--store", store]) == 1
    assert "unknown teleop 'joystick'; valid choices: gamepad, keyboard" in capsys.readouterr().err
    assert record_cmd(["env=arm_reach", "--teleop", "scripted", "--steps", "5", "--store", store]) == 1
    assert "env.max_episode_steps" in capsys.readouterr().err
    assert record_cmd(["env=quadrotor_hover", "robot=sim_arm", "--teleop", "scripted", "--store", store]) == 1
    assert "action" in capsys.readouterr().err  # the twin does not fit the arm: refused before anything moves


def test_action_noise_is_recorded_as_acted(tmp_path):
    """--action-noise perturbs the actions the env gets, and the store holds the perturbed ones (in the box)."""
    stores = {"clean": tmp_path / "clean.zarr", "noisy": tmp_path / "noisy.zarr"}
    for name, store in stores.items():
        noise = ["--action-noise", "0.3"] if name == "noisy" else []
        assert record_cmd(["env=arm_reach", "--operator", "scripted", "--episodes", "8", "--store", str(store),
                           *noise]) == 0  # fmt: skip
    first = {name: torch.stack([EpisodeStore(s).episode(i)[0] for i in range(8)]) for name, s in stores.items()}
    torch.testing.assert_close(first["noisy"][keys.OBS], first["clean"][keys.OBS])  # the same resets
    spec = registry.build("env", "arm_reach", {}, num_envs=1).action_spec
    noisy, clean = first["noisy"][keys.ACTION], first["clean"][keys.ACTION]
    assert (noisy != clean).float().mean() > 0.5
    assert bool((noisy >= spec.low).all() and (noisy <= spec.high).all())
