"""Checkpoints that were damaged or half written: checksums name the damaged file, the previous
checkpoint (`<name>.old`) is used when the newest is missing or damaged, old checkpoints without
checksums still load."""

import json
import shutil
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch

from embodied.cli import compose
from embodied.runner import checkpoint
from embodied.runner.checkpoint import DamagedCheckpointError
from embodied.runner.trainer import Trainer

LOADERS = {"model.safetensors": checkpoint.load_model, "trainer.safetensors": checkpoint.load_trainer,
           "meta.json": checkpoint.load_trainer, "config.yaml": checkpoint.load_config}


def save(run: Path, version: int) -> Path:
    """checkpoints/latest of a fake run, every part of it saying `version`."""
    model = {"w": torch.full((64, 64), float(version)), "b": torch.arange(64.0)}
    trainer = {"iteration": version, "algo": {"step": torch.tensor(version)}}
    checkpoint.save_checkpoint(run / "checkpoints" / "latest", model, trainer, {"name": f"v{version}", "seed": 0})
    return run / "checkpoints" / "latest"


def version(path: Path) -> int:
    return int(checkpoint.load_model(path)["w"][0, 0])


def flip_bit(file: Path, offset: int) -> None:
    data = bytearray(file.read_bytes())
    data[offset % len(data)] ^= 0x04
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("name", LOADERS)
def test_bit_flip_names_the_file_and_find_falls_back(tmp_path, name):
    save(tmp_path, 1)
    latest = save(tmp_path, 2)
    assert sorted(checkpoint.FILES) == sorted(json.loads((latest / "checksums.json").read_text())["sha256"])
    flip_bit(latest / name, -9)  # inside the tensors or the text, where a flip still parses
    with pytest.raises(DamagedCheckpointError, match=f"latest/{name} is damaged: its sha256"):
        LOADERS[name](latest)
    with pytest.warns(UserWarning, match=f"latest/{name} is damaged.*falling back to the previous checkpoint .*old"):
        found = checkpoint.find_checkpoint(tmp_path)
    assert found.name == "latest.old" and version(found) == 1
    with pytest.warns(UserWarning, match="falling back"):  # also when the checkpoint directory is named
        assert checkpoint.find_checkpoint(latest) == found


def test_crash_between_the_two_renames_keeps_the_previous_checkpoint(tmp_path):
    save(tmp_path, 1)
    save(tmp_path, 2)
    real_rename, calls = Path.rename, []

    def crash_on_second(self, target):  # the process dies after `latest -> latest.old`
        calls.append(target)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed between the renames")
        return real_rename(self, target)

    with mock.patch.object(Path, "rename", crash_on_second), pytest.raises(KeyboardInterrupt):
        save(tmp_path, 3)
    ckpts = tmp_path / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest.old", "latest.tmp"]
    with pytest.warns(UserWarning, match="latest is missing .*falling back to the previous checkpoint"):
        assert version(checkpoint.find_checkpoint(tmp_path)) == 2
    save(tmp_path, 4)  # the next save keeps latest.old (the only good one) until latest is in place
    assert version(ckpts / "latest") == 4 and version(ckpts / "latest.old") == 2


def test_both_damaged_is_an_error_and_no_checkpoint_is_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        checkpoint.find_checkpoint(tmp_path)
    save(tmp_path, 1)
    latest = save(tmp_path, 2)
    flip_bit(latest / "model.safetensors", -1)
    flip_bit(latest.with_name("latest.old") / "config.yaml", -3)
    with pytest.raises(DamagedCheckpointError, match="latest.old/config.yaml is damaged"):
        checkpoint.find_checkpoint(tmp_path)


def test_checkpoints_without_checksums_load_with_one_warning(tmp_path):
    latest = save(tmp_path, 1)
    (latest / "checksums.json").unlink()  # as saved before checkpoints carried checksums
    with pytest.warns(UserWarning, match="no checksums.json .*loaded unchecked"):
        assert checkpoint.find_checkpoint(tmp_path) == latest
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per checkpoint
        assert version(latest) == 1 and checkpoint.load_trainer(latest)["iteration"] == 1
    (latest / "model.safetensors").write_bytes((latest / "model.safetensors").read_bytes()[:100])
    with pytest.raises(DamagedCheckpointError, match="latest/model.safetensors cannot be read"):
        checkpoint.load_model(latest)


def test_resume_uses_the_previous_checkpoint_when_latest_is_missing_or_damaged(tmp_path):
    # 3 iterations, a checkpoint every 2: latest holds iteration 3, latest.old iteration 2
    overrides = ["experiment=arm_reach", "train.num_envs=64", "train.rollout_steps=8", "train.total_env_steps=1536",
                 "train.checkpoint_every=2", "train.eval_episodes=0", "train.progress=false"]
    Trainer(compose(overrides), tmp_path).learn()
    ckpts = tmp_path / "checkpoints"
    for ckpt in ckpts.iterdir():  # every saved checkpoint carries checksums that hold
        assert (ckpt / "checksums.json").exists(), ckpt
        checkpoint.verify(ckpt)
    latest = shutil.copytree(ckpts / "latest", tmp_path / "copy")

    flip_bit(ckpts / "latest" / "trainer.safetensors", -5)
    with pytest.warns(UserWarning, match="latest/trainer.safetensors is damaged.*previous checkpoint"):
        assert Trainer.resume(tmp_path).iteration == 2

    # the state a crash between the renames of a 4th save leaves: latest -> latest.old done, no latest
    shutil.rmtree(ckpts)
    shutil.copytree(latest, ckpts / "latest.old")
    (ckpts / "latest.tmp").mkdir()
    with pytest.warns(UserWarning, match="latest is missing"):
        resumed = Trainer.resume(tmp_path)
    assert resumed.iteration == 3
    resumed.learn()  # continues and checkpoints as usual
    checkpoint.verify(ckpts / "latest")


def test_saving_over_a_damaged_newest_keeps_the_good_previous_one(tmp_path):
    """The rotation moves the newest to `.old`: a damaged newest must not push out the intact previous one."""
    save(tmp_path, 1)
    latest = save(tmp_path, 2)
    flip_bit(latest / "model.safetensors", -9)
    save(tmp_path, 3)
    assert version(latest) == 3 and version(latest.with_name("latest.old")) == 1
