"""The staged pipeline (demos -> bc -> offline -> online): stage folders, resume at any stage, the CLI path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from embodied import keys
from embodied.cli import compose
from embodied.config import ConfigError
from embodied.data.replay import SOURCE, MixedSampler
from embodied.runner import checkpoint
from embodied.data.store import EpisodeStore
from embodied.runner import pipeline as pipeline_module
from embodied.runner.pipeline import Pipeline
from embodied.runner.pipeline import runner_class
from embodied.runner.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
TINY = ["experiment=arm_reach_o2o", "train.num_envs=8", "train.total_env_steps=96", "train.eval_episodes=8",
        "train.progress=false", "policy.actor_hidden=[16]", "policy.critic_hidden=[16]",
        "pipeline.demos.episodes=8", "pipeline.bc.updates=20", "pipeline.bc.batch_size=32",
        "pipeline.offline.updates=6", "pipeline.offline.eval_every=3", "pipeline.offline.algo.batch_size=32",
        "pipeline.online.warmup_steps=32", "pipeline.online.eval_every=32",
        "pipeline.online.eval_episodes=4", "algo.batch_size=32", "algo.utd_ratio=0.25"]


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


CALQL = ["~pipeline.offline.algo", "+pipeline.offline.algo={name: calql, batch_size: 32, num_samples: 2}"]


@pytest.mark.parametrize("offline", ["iql", "calql"])
def test_stages_write_metrics_and_checkpoints(tmp_path, offline):
    summary = Pipeline(compose(TINY + (CALQL if offline == "calql" else [])), tmp_path).learn()
    assert summary["env_steps"] == 96 and summary["eval/episodes"] == 8
    for stage in ("bc", "offline", "online"):
        assert (tmp_path / stage / "checkpoints" / "final" / "model.safetensors").exists(), stage
    assert [r["update"] for r in rows(tmp_path / "offline" / "metrics.jsonl")] == [3, 6]
    online = rows(tmp_path / "online" / "metrics.jsonl")
    assert [r["env_steps"] for r in online] == [0, 32, 64, 96]
    # WSRL warm-up: no update during the first 32 env steps; then 8 envs x 0.25 = 2 updates per collect
    assert online[1]["updates"] == 0 and online[-1]["updates"] == (96 - 32) // 8 * 2
    assert "eval/success" in online[-1] and (tmp_path / "online" / "curve.png").exists()
    assert (tmp_path / "config.yaml").exists() and runner_class(str(tmp_path)) is Pipeline


def test_demos_are_recorded_once_into_the_run_and_read_as_data(tmp_path):
    pipeline = Pipeline(compose(TINY + ["pipeline.demos.action_noise=0.0"]), tmp_path)
    (tmp_path / "demos.partial.zarr").mkdir(parents=True)  # a recording an earlier start was killed in
    [path] = pipeline.data_paths()
    assert path == tmp_path / "demos.zarr" and not (tmp_path / "demos.partial.zarr").exists()
    with EpisodeStore(path) as store:
        assert store.num_episodes == 8  # one whole episode per demo env
        stamp = (path / "zarr.json").stat().st_mtime_ns
    assert pipeline.data_paths() == [path] and (path / "zarr.json").stat().st_mtime_ns == stamp  # not recorded again
    demos = pipeline.open([path]).columns()
    done = demos[keys.TERMINATED]
    assert done.sum() >= 6  # the noiseless scripted expert succeeds (terminates) almost always
    # the return-to-go of a terminated episode's last step is its reward
    assert torch.allclose(demos[keys.MC_RETURN][done], demos[keys.REWARD][done])


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """One uninterrupted run that the resumed ones must match bit for bit."""
    run_dir = tmp_path_factory.mktemp("straight")
    pipeline = Pipeline(compose(TINY), run_dir)
    pipeline.learn()
    return run_dir, {k: v.clone() for k, v in pipeline.policy.state_dict().items()}


@pytest.mark.parametrize("stop_after", ["offline", "online-latest"])  # a stage boundary, and mid-stage
def test_resume_at_any_stage_matches_the_uninterrupted_run(tmp_path, straight_run, stop_after):
    straight_dir, straight_weights = straight_run
    # the same run, interrupted: finished stages are kept, later ones removed as if never reached
    shutil.copytree(straight_dir, tmp_path / "resumed")
    resumed_dir = tmp_path / "resumed"
    if stop_after == "offline":
        shutil.rmtree(resumed_dir / "online")
    else:  # killed during the online stage, after its checkpoint at 64 env steps
        interrupted = Pipeline(compose(TINY + ["train.total_env_steps=64"]), tmp_path / "partial")
        interrupted.learn()
        shutil.rmtree(resumed_dir / "online")
        shutil.copytree(tmp_path / "partial" / "online", resumed_dir / "online")
        shutil.rmtree(resumed_dir / "online" / "checkpoints" / "final")
        with (resumed_dir / "online" / "metrics.jsonl").open("a") as f:  # a line written after the checkpoint
            f.write(json.dumps({"env_steps": 80, "iteration": 80}) + "\n")
    resumed = runner_class(str(resumed_dir)).resume(resumed_dir)
    assert resumed.iteration == 2 and resumed.env_steps == (0 if stop_after == "offline" else 64)  # stages done
    resumed.learn()
    for key, value in straight_weights.items():
        assert torch.equal(value, resumed.policy.state_dict()[key]), key
    curve = [r["env_steps"] for r in rows(resumed_dir / "online" / "metrics.jsonl")]
    assert curve == [0, 32, 64, 96]


def test_bad_pipeline_configs_fail_at_start(tmp_path):
    with pytest.raises(ConfigError, match="demos.episodes"):
        Pipeline(compose(TINY + ["pipeline.demos.episodes=0"]), tmp_path)
    with pytest.raises(KeyError, match="unknown algo 'cql'"):
        Pipeline(compose(TINY + ["pipeline.offline.algo={name: cql}"]), tmp_path)
    with pytest.raises(ConfigError, match="replay buffer"):
        Trainer(compose(["experiment=arm_reach", "algo=sac", "policy=sac_mlp"]), tmp_path)


@pytest.mark.slow  # a subprocess importing the whole stack: 70 s measured on the shared, loaded machine
def test_cli_runs_the_pipeline_and_finds_its_checkpoint(tmp_path):
    run = [sys.executable, "-m", "embodied.cli"]
    out = subprocess.run([*run, "train", *TINY, f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "evaluation: success" in out.stdout
    # `embodied eval <run dir>` loads what find_checkpoint returns: the last stage's final weights
    assert checkpoint.find_checkpoint(tmp_path / "run") == tmp_path / "run" / "online" / "checkpoints" / "final"


def test_rlpd_online_stage_samples_offline_and_online_data_half_and_half(tmp_path):
    overrides = TINY + ["algo=rlpd", "algo.batch_size=32", "algo.utd_ratio=2", "policy.num_critics=4",
                        "policy.layer_norm=true", "pipeline.bc.updates=0", "pipeline.offline.updates=0",
                        "pipeline.online.offline_fraction=0.5", "pipeline.online.warmup_steps=0",
                        "train.total_env_steps=32"]
    pipeline = Pipeline(compose(overrides), tmp_path)
    seen = []
    original = MixedSampler.sample

    def spy(self, batch_size, generator=None):
        batch = original(self, batch_size, generator)
        seen.append(batch[SOURCE].bincount(minlength=2).tolist())
        return batch

    MixedSampler.sample = spy
    try:
        pipeline.learn()
    finally:
        MixedSampler.sample = original
    # every RLPD batch: 16 rows of demos and 16 of online data
    assert seen and all(counts == [16, 16] for counts in seen)
    assert rows(tmp_path / "online" / "metrics.jsonl")[-1]["updates"] == len(seen)


def test_critic_warmup_freezes_the_actor_while_the_critic_learns(tmp_path):
    Pipeline(compose(TINY + ["pipeline.online.critic_warmup_updates=1000"]), tmp_path).learn()
    before = checkpoint.load_model(tmp_path / "offline" / "checkpoints" / "final", "cpu")
    after = checkpoint.load_model(tmp_path / "online" / "checkpoints" / "final", "cpu")
    actor = [k for k in before if k.startswith("actor")]
    critic = [k for k in before if k.startswith("critic.")]
    assert actor and critic
    assert all(torch.equal(before[k], after[k]) for k in actor)  # 16 online updates, all critic-only
    assert any(not torch.equal(before[k], after[k]) for k in critic)


def test_ppo_online_stage_fine_tunes_the_behaviour_cloned_policy(tmp_path, monkeypatch):
    """algo=ppo: the online stage is the on-policy Trainer, started from the BC weights (with a zero step
    size the weights after it are the BC stage's) and resumable like any stage."""
    overrides = ["experiment=arm_reach_bc_ppo", "train.num_envs=8", "train.rollout_steps=4", "train.total_env_steps=64",
                 "train.eval_episodes=4", "train.progress=false", "policy.actor_hidden=[16]", "policy.critic_hidden=[16]", "pipeline.demos.episodes=8",
                 "pipeline.bc.updates=20", "pipeline.bc.batch_size=32", "pipeline.online.eval_episodes=4",
                 "algo.lr=1e-30", "algo.desired_kl=null", "algo.minibatches=2", "train.eval_every=1"]
    pipeline = Pipeline(compose(overrides), tmp_path)
    calls, evaluate = [], pipeline_module.evaluate
    monkeypatch.setattr(pipeline_module, "evaluate", lambda *a, **k: calls.append(a) or evaluate(*a, **k))
    summary = pipeline.learn()
    assert summary["env_steps"] == 64 and summary["eval/episodes"] == 4
    bc = checkpoint.load_model(tmp_path / "bc" / "checkpoints" / "final")
    online = checkpoint.load_model(tmp_path / "online" / "checkpoints" / "final")
    actor = [k for k in bc if "actor" in k or "log_std" in k]
    assert actor and all(torch.allclose(bc[k], online[k]) for k in actor)
    # the experiment keeps the demos' state statistics (policy.normalize_until=1): PPO's rollouts leave them alone
    assert all(torch.equal(bc[k], online[k]) for k in ("state_norm.mean", "state_norm.var", "state_norm.count"))
    records = rows(tmp_path / "online" / "metrics.jsonl")
    assert [r["env_steps"] for r in records if "algo/loss" in r] == [32, 64]
    assert [r["env_steps"] for r in records if "eval/success" in r] == [32, 64, 64]  # eval_every=1, then the last
    # the stage's last evaluation (the same 4 episodes from the same seed) is the pipeline's final one, not redone
    assert all(summary[k] == records[-1][k] for k in ("eval/success", "eval/return", "eval/episodes"))
    assert len(calls) == 1  # BC's evaluation only
    assert Pipeline.resume(tmp_path).iteration == 2  # bc and online done; offline skipped


def test_wsrl_is_a_named_online_setting(tmp_path):
    """recipe=wsrl keeps no offline data online and warms up first (its 5,000 steps unless set); an offline share
    beside it is refused by name."""
    config = compose(TINY + ["pipeline.online.recipe=wsrl", "pipeline.online.warmup_steps=null"])
    pipeline = Pipeline(config, tmp_path)
    assert pipeline.cfg.online.offline_fraction == 0.0 and pipeline.cfg.online.warmup_steps == 5_000
    assert compose(TINY)["pipeline"]["online"]["recipe"] == "rlpd"
    assert Pipeline(compose(TINY), tmp_path / "b").cfg.online.offline_fraction == 0.5
    with pytest.raises(ConfigError, match="recipe=wsrl retains no offline data"):
        Pipeline(compose(TINY + ["pipeline.online.recipe=wsrl", "pipeline.online.offline_fraction=0.5"]), tmp_path / "c")
    with pytest.raises(ConfigError, match="recipe='rlpdd': choose one of rlpd, wsrl"):
        Pipeline(compose(TINY + ["pipeline.online.recipe=rlpdd"]), tmp_path / "d")
    summary = Pipeline(compose(TINY + ["pipeline.online.recipe=wsrl"]), tmp_path / "run").learn()  # warm-up 32
    online = rows(tmp_path / "run" / "online" / "metrics.jsonl")
    assert summary["env_steps"] == 96 and online[1]["updates"] == 0 and online[-1]["updates"] > 0


@pytest.fixture(scope="module")
def corrections(tmp_path_factory):
    """A store as a correction session writes it: recorded episodes with every other row flagged is_intervention."""
    from embodied import registry
    from embodied.data.record import record

    root = tmp_path_factory.mktemp("corrections")
    record(registry.build("env", "arm_reach", {}, num_envs=8), root / "plain.zarr", episodes=8, seed=0)
    with EpisodeStore(root / "plain.zarr") as src, EpisodeStore(root / "episodes.zarr", mode="a") as dst:
        for i in range(src.num_episodes):
            episode = src.episode(i)
            episode[keys.IS_INTERVENTION] = torch.arange(episode.batch_size[0]) % 2 == 0
            dst.append_episode(episode)
    return root


def test_a_store_with_intervention_flags_trains_every_stage_and_mixes_online(tmp_path, corrections):
    """The online stage samples the store 50/50 with the online buffer (a correction store carries is_intervention,
    which online rows do not: the mix takes a transition's keys only); enough online steps to sample batches."""
    overrides = ["pipeline.demos.episodes=0", f"data={corrections}", "pipeline.online.warmup_steps=0"]
    summary = Pipeline(compose(TINY + overrides), tmp_path).learn()
    online = rows(tmp_path / "online" / "metrics.jsonl")
    # from the 4th collect on (32 online rows = one batch), 8 envs x utd 0.25 = 2 updates per collect
    assert summary["env_steps"] == 96 and online[-1]["updates"] == (96 - 24) // 8 * 2


def test_hg_dagger_clones_only_the_operator_rows(tmp_path, corrections):
    """pipeline.bc.rows=interventions: BC sees the flagged rows alone (HG-DAgger); a store with none is refused."""
    pipeline = Pipeline(compose(TINY + ["pipeline.demos.episodes=0", f"data={corrections}"]), tmp_path)
    every = pipeline.open(pipeline.data_paths())
    source = every.interventions()
    assert 0 < len(source) < len(every)
    assert bool(source.sample(64, torch.Generator().manual_seed(0))[keys.IS_INTERVENTION].all())
    overrides = ["pipeline.demos.episodes=0", f"data={corrections}", "pipeline.bc.rows=interventions",
                 "pipeline.offline.updates=0", "train.total_env_steps=0"]
    Pipeline(compose(TINY + overrides), tmp_path / "run").learn()
    assert (tmp_path / "run" / "bc" / "checkpoints" / "final" / "model.safetensors").exists()
    plain = ["pipeline.demos.episodes=0", f"data={corrections / 'plain.zarr'}", "pipeline.bc.rows=interventions"]
    with pytest.raises(ConfigError, match="hold no intervention rows"):
        Pipeline(compose(TINY + plain), tmp_path / "plain").learn()


def test_random_shift_moves_each_image_by_its_own_offset_within_the_pad():
    """pipeline.bc.shift (DrQ): every row moves by an integer (dy, dx) in [-pad, pad], the border repeated; the
    interior of the image is the original's, displaced; a fixed generator gives the same shifts."""
    from tensordict import TensorDict

    from embodied.runner.bc import BCConfig, random_shift, shift_images

    images = torch.arange(6 * 8 * 3, dtype=torch.int64).view(1, 6, 8, 3).repeat(16, 1, 1, 1).to(torch.uint8)
    moved = random_shift(images, 2, torch.Generator().manual_seed(0))
    assert moved.shape == images.shape and moved.dtype == torch.uint8
    offsets = set()
    for row in range(16):
        found = [(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)
                 if torch.equal(moved[row, 2:4, 2:6], images[row, 2 + dy:4 + dy, 2 + dx:6 + dx])]
        assert len(found) == 1, row
        offsets.add(found[0])
    assert len(offsets) > 3  # rows differ
    assert torch.equal(moved, random_shift(images, 2, torch.Generator().manual_seed(0)))
    batch = TensorDict({"obs": {"state": torch.zeros(16, 2), "images": {"front": images.clone()}}}, batch_size=[16])
    shift_images(batch, 2, torch.Generator().manual_seed(0))
    assert torch.equal(batch["obs", "images", "front"], moved) and torch.equal(batch["obs", "state"], torch.zeros(16, 2))
    with pytest.raises(ConfigError, match="pipeline.bc.shift"):
        BCConfig(shift=-1)


# the pixel VLA's perception stage alone, small: 24 px frames, 256 of them, lr 1e-2 (at 1e-3 the keypoint tower starts
# to place the goal only after ~300 updates of 256 frames)
PIXELS = ["experiment=mujoco_reach_rgb_vla_ppo", "env.image_size=24", "train.num_envs=16", "train.total_env_steps=0",
          "train.eval_episodes=0", "train.eval_every=0", "train.progress=false", "pipeline.demos.episodes=0",
          "pipeline.bc.updates=0", "pipeline.online.eval_episodes=2", "pipeline.perception.updates=300",
          "pipeline.perception.frames=256", "pipeline.perception.batch_size=64", "pipeline.perception.lr=1e-2",
          "policy.freeze_vision=true"]


def test_perception_stage_trains_the_frozen_tower_on_the_privileged_state(tmp_path):
    """pipeline.perception: the pixel VLA's tower and aux head regress the privileged state (the goal) from the env's
    reset frames before BC, under freeze_vision too (frozen again after: BC and RL keep it); its held-out estimate
    beats guessing the training frames' mean, the stage is checkpointed like the others, and resuming skips it."""
    pytest.importorskip("sims.mujoco")
    pipeline = Pipeline(compose(PIXELS), tmp_path)
    tower = {k: v.detach().clone() for k, v in pipeline.policy.vision.named_parameters()}
    summary = pipeline.learn()
    policy = pipeline.policy
    assert not any(torch.equal(v, tower[k]) for k, v in policy.vision.named_parameters())
    assert not any(p.requires_grad for p in policy.vision.parameters())
    [record] = rows(tmp_path / "perception" / "metrics.jsonl")
    assert record["update"] == 300 and summary["perception/eval/privileged_error"] == record["eval/privileged_error"]
    # the base rate: the held-out frames' distance from the training frames' mean privileged state
    frames = pipeline_module.reset_frames(pipeline.env, [4_000_037 + r for r in range(16 + 2)])
    train, test = frames[:256][keys.PRIVILEGED], frames[256:][keys.PRIVILEGED]
    guess = float((test - train.mean(0)).norm(dim=-1).median())
    assert record["eval/privileged_error"] < 0.7 * guess, (record, guess)
    final = tmp_path / "perception" / "checkpoints" / "final"
    assert checkpoint.usable(final) is not None
    stamp = (tmp_path / "perception" / "metrics.jsonl").stat().st_mtime_ns
    resumed = Pipeline.resume(tmp_path)
    assert resumed.iteration == 1
    resumed.learn()  # the stage is done: its weights are loaded, not trained again
    assert (tmp_path / "perception" / "metrics.jsonl").stat().st_mtime_ns == stamp
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in resumed.policy.state_dict().items())


def test_perception_stage_needs_a_policy_with_a_privileged_regression(tmp_path):
    with pytest.raises(ConfigError, match=r"pipeline.perception trains the vision tower .* policy 'sac_mlp' has none"):
        Pipeline(compose(TINY + ["+pipeline.perception={updates: 10}"]), tmp_path)
