"""train.collect_ahead: the next rollout collected in a worker process while the update runs (one update stale)."""

import copy
import os
import signal

import pytest
import torch

from embodied import keys
from embodied.cli import compose
from embodied.config import ConfigError
from embodied.rollout import Collector
from embodied.runner import checkpoint
from embodied.runner.collect_ahead import AheadCollector, unavailable
from embodied.runner.pipeline import runner_class
from embodied.runner.trainer import Trainer

SMALL = ["experiment=quadrotor_hover", "train.num_envs=64", "train.rollout_steps=8", "train.total_env_steps=2048",
         "train.checkpoint_every=2", "train.eval_episodes=0", "train.progress=false"]


def weights(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


# MuJoCo without cameras: its stepping pool (native threads, 2 by default) is made anew in the forked worker; the
# parent's, which a fork leaves without its threads, hung it (sims/mujoco/physics.py)
MUJOCO = ["experiment=mujoco_reach", "train.num_envs=8", "train.rollout_steps=8", "train.total_env_steps=256",
          "train.checkpoint_every=2", "train.eval_episodes=0", "train.eval_every=0", "train.progress=false"]


@pytest.mark.parametrize("small", [SMALL, MUJOCO], ids=["quadrotor", "mujoco"])
def test_each_rollout_is_the_one_an_in_process_collector_gives_with_the_weights_one_update_old(tmp_path, small):
    if small is MUJOCO:
        pytest.importorskip("sims.mujoco")
    ahead = Trainer(compose(small + ["train.collect_ahead=true"]), tmp_path / "ahead")
    assert isinstance(ahead.collector, AheadCollector)
    ahead.learn()

    # the same schedule in one process: rollout k + 1 collected with the weights before update k, from the worker's
    # random stream (seeded from the learner's when the first collection starts), the learner's stream untouched
    ref = Trainer(compose(small + ["train.collect_ahead=false"]), tmp_path / "ref")
    actor = copy.deepcopy(ref.policy)
    collector = Collector(ref.env, actor, steps=8)
    torch.set_rng_state(ref.rng_state)
    collector.reset(seed=0)
    seed = int(torch.randint(2**62, ()))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        worker_rng = torch.get_rng_state()

    def collect_with(state):
        nonlocal worker_rng
        actor.load_state_dict(state)
        with torch.random.fork_rng():
            torch.set_rng_state(worker_rng)
            batch = collector.collect().clone()
            worker_rng = torch.get_rng_state()
        return batch

    batch = collect_with(ref.policy.state_dict())
    batch[keys.STALENESS] = torch.zeros(batch.batch_size, dtype=torch.long)
    for _ in range(4):
        following = collect_with(ref.policy.state_dict())
        ref.algo.update(batch)
        ref.policy.observe(batch[keys.OBS])
        batch = following
        batch[keys.STALENESS] = torch.ones(batch.batch_size, dtype=torch.long)
    for key, value in weights(ref).items():
        assert torch.equal(value, ahead.policy.state_dict()[key]), key
    # and one process collecting after each update is another run
    plain = Trainer(compose(small + ["train.collect_ahead=false"]), tmp_path / "plain")
    plain.learn()
    assert not torch.equal(plain.policy.state_dict()["log_std"], ahead.policy.state_dict()["log_std"])


def test_a_run_resumed_from_its_checkpoint_goes_on_exactly(tmp_path):
    overrides = SMALL + ["train.collect_ahead=true", "train.total_env_steps=4096"]
    straight = Trainer(compose(overrides), tmp_path / "straight")
    straight.learn()

    first = Trainer(compose(overrides[:-1] + ["train.total_env_steps=1024"]), tmp_path / "resumed")
    first.learn()  # 2 updates; the worker had collected the third rollout: the checkpoint holds it
    cfg_path = tmp_path / "resumed" / "checkpoints" / "latest" / "config.yaml"
    cfg_path.write_text(cfg_path.read_text().replace("total_env_steps: 1024", "total_env_steps: 4096"))
    checkpoint.reseal(cfg_path.parent)
    state = checkpoint.load_trainer(cfg_path.parent)["collector"]
    assert state["ahead.obs.state"].shape == (8, 64, 27) and "worker_rng" in state
    resumed = Trainer.resume(tmp_path / "resumed")
    assert resumed.iteration == 2
    resumed.learn()
    for key, value in weights(straight).items():
        assert torch.equal(value, resumed.policy.state_dict()[key]), key


def test_batches_after_the_first_are_marked_one_update_old_and_the_episode_stats_come_back(tmp_path):
    trainer = Trainer(compose(SMALL + ["train.collect_ahead=true", "train.rollout_steps=160"]), tmp_path)
    trainer.collector.reset(seed=0)
    try:
        first, second = trainer.collector.collect(), trainer.collector.collect()
        assert first[keys.STALENESS].eq(0).all() and second[keys.STALENESS].eq(1).all()
        assert not torch.equal(first[keys.OBS][keys.STATE], second[keys.OBS][keys.STATE])  # a copy, not the buffer
        stats = trainer.collector.pop_episode_stats()  # 320 steps of episodes that end by crashing or at 300 steps
        assert stats["episodes"] >= 64 and stats["length"] <= 300
    finally:
        trainer.collector.close()


def test_a_worker_that_dies_or_fails_is_named(tmp_path):
    trainer = Trainer(compose(SMALL + ["train.collect_ahead=true"]), tmp_path)
    trainer.collector.reset(seed=0)
    trainer.collector.collect()  # the second collection is now in flight
    os.kill(trainer.collector._proc.pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"collect_ahead worker process died \(exit code -9\)"):
        trainer.collector.collect()

    trainer = Trainer(compose(SMALL + ["train.collect_ahead=true"]), tmp_path / "b")

    def broken_step(action):
        raise ValueError("the simulator blew up")

    trainer.env.step = broken_step  # the worker forks with it
    trainer.collector.reset(seed=0)
    with pytest.raises(RuntimeError, match="(?s)worker failed.*ValueError: the simulator blew up"):
        trainer.collector.collect()


@pytest.mark.parametrize("overrides, message", [
    (["algo=grpo"], "collects env steps ahead for PPO"),
    (["algo=sac"], "steps and updates in turn from a replay buffer"),
])
def test_algorithms_it_cannot_serve_are_refused_by_name(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        runner_class(config := compose(SMALL + ["train.collect_ahead=true", *overrides]))(config, tmp_path)


def test_where_it_does_not_apply_a_notice_says_so_and_the_run_collects_in_process(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        trainer = Trainer(compose(SMALL + ["train.collect_ahead=true", "threads=2"]), tmp_path)
    finally:
        torch.set_num_threads(threads)
    assert "runs one torch thread in each of two processes; this run has threads=2" in capsys.readouterr().out
    assert type(trainer.collector) is Collector
    assert "cluster=ray runs its collection on its workers" in unavailable(trainer.env, "ray")
    assert unavailable(trainer.env, "local") is None
    with pytest.MonkeyPatch.context() as patch:  # a machine, or a taskset, with one core: nothing to overlap on
        patch.setattr(os, "sched_getaffinity", lambda pid: {0})
        assert "may run on one CPU core only" in unavailable(trainer.env, "local")
    # a MuJoCo camera's GL context does not survive a fork
    mujoco = Trainer(compose(["experiment=mujoco_reach_rgb", "train.num_envs=2", "train.collect_ahead=true"]),
                     tmp_path / "mj")
    assert "MujocoReachEnv is not marked as surviving a fork" in capsys.readouterr().out
    assert type(mujoco.collector) is Collector


def test_the_worker_acts_with_a_copy_of_the_policy(tmp_path):
    trainer = Trainer(compose(SMALL), tmp_path)
    with pytest.raises(ConfigError, match="its own copy of the policy"):
        AheadCollector(Collector(trainer.env, trainer.policy, 8), trainer.policy)
