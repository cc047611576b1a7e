"""cluster=ray: collection on Ray actors (embodied/distributed) against the single-process loop.

One local Ray instance (2 CPUs) serves the module; the 2-node test starts its own simulated cluster."""

import json
import os
import signal
from dataclasses import dataclass

import pytest
import torch

ray = pytest.importorskip("ray", reason="cluster=ray needs the ray extra")

from embodied import keys  # noqa: E402
from embodied.cli import compose  # noqa: E402
from embodied.config import ConfigError  # noqa: E402
from embodied.distributed.config import workers_at_normal_priority  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402
from sims.arm_reach.env import ArmReachConfig, ArmReachEnv  # noqa: E402

SMALL = ["experiment=arm_reach", "train.num_envs=16", "train.rollout_steps=8", "train.total_env_steps=512",
         "train.checkpoint_every=100", "train.eval_episodes=0", "train.progress=false"]


@pytest.fixture(scope="module")
def local_ray():
    workers_at_normal_priority()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


def curve(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["iteration"], r.get("train/return"), r["algo/loss"]) for r in rows if "algo/loss" in r]


def state(trainer):
    return {k: v.clone() for k, v in trainer.policy.state_dict().items()}


# the 4 collections' transfers: the first weights are whole and the first batch sizes its block, so both cross
# through Ray's object store, and the 3 after through shared memory; disaggregated batches are built here
SHARED = {"weights": (1, 3), "batches": (1, 3)}
ROUTES = {"colocated": SHARED, "pipelined": SHARED, "disaggregated": {"weights": (1, 3), "batches": (0, 0)},
          "colocated, object store": {"weights": (4, 0), "batches": (4, 0)}}


@pytest.mark.parametrize("placement", list(ROUTES))
def test_synchronous_run_with_one_worker_reproduces_the_single_process_curve(tmp_path, local_ray, placement):
    plain = Trainer(compose(SMALL), tmp_path / "plain")
    plain.learn()
    over = [f"cluster.placement={placement.split(',')[0]}"] + ["cluster.shared_memory=false"] * ("," in placement)
    ray_run = Trainer(compose(SMALL + ["cluster=ray"] + over), tmp_path / "ray")
    ray_run.learn()
    assert curve(tmp_path / "plain") == curve(tmp_path / "ray") and len(curve(tmp_path / "ray")) == 4
    for key, value in state(plain).items():
        torch.testing.assert_close(ray_run.policy.state_dict()[key], value, rtol=0, atol=0, msg=key)
    routes = ray_run.collector.transfers
    assert {what: (routes[what, "object store"], routes[what, "shared memory"]) for what in ("weights", "batches")} \
        == ROUTES[placement]
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"embodied_{os.getpid()}_")]  # unlinked at the end


@pytest.mark.slow  # ~35 s: three runs of three workers
def test_pipelined_workers_give_one_batch_with_versions_and_a_repeatable_run(tmp_path, local_ray):
    # three workers on the 2-CPU instance: half a CPU each
    over = SMALL + ["cluster=ray", "cluster.placement=pipelined", "cluster.env_workers=2", "cluster.env_cpus=0.5",
                    "cluster.rollout_cpus=0.5"]
    a = Trainer(compose(over), tmp_path / "a")
    batch = a.collector.collect()
    assert batch.batch_size == (8, 16) and (batch[keys.POLICY_VERSION] == 0).all()
    assert (batch[keys.STALENESS] == 0).all()
    a.collector.close()
    for name in ("b", "c"):  # one after another: each run's workers hold 1.5 of the 2 CPUs
        Trainer(compose(over), tmp_path / name).learn()
    assert curve(tmp_path / "b") == curve(tmp_path / "c")


def test_pipeline_stages_step_their_own_envs_and_streams_and_a_run_repeats(tmp_path, local_ray):
    """cluster.pipeline_stages=2: the env worker's envs in two groups, each stepped in its own thread and sampled
    from its own stream at the rollout worker, so a run repeats whatever order the threads' calls arrive in."""
    over = SMALL + ["cluster=ray", "cluster.placement=pipelined", "cluster.pipeline_stages=2"]
    a = Trainer(compose(over), tmp_path / "a")
    a.collector.reset(seed=0)
    batch = a.collector.collect()
    assert batch.batch_size == (8, 16) and (batch[keys.STALENESS] == 0).all()
    first, second = batch[keys.OBS]["state"][0, :8], batch[keys.OBS]["state"][0, 8:]
    assert not torch.equal(first, second)  # the groups reset from seeds of their own
    a.collector.close()
    for name in ("b", "c"):
        Trainer(compose(over), tmp_path / name).learn()
    assert curve(tmp_path / "b") == curve(tmp_path / "c") and len(curve(tmp_path / "b")) == 4
    with pytest.raises(ConfigError, match="train.num_envs=16 must be a multiple of cluster.env_workers=1 x "
                                          "cluster.pipeline_stages=3"):
        Trainer(compose(over + ["cluster.pipeline_stages=3"]), tmp_path / "bad")


def test_pipeline_stages_render_in_their_own_threads(tmp_path, local_ray):
    """A MuJoCo renderer's GL context is current in the thread that made it: each stage's envs are built, stepped
    and closed in that stage's thread (stepping them from another failed with EGL_BAD_ACCESS). env.num_threads=1:
    the stage's own thread draws the frames (with more, the env's render threads do, sims/mujoco/render.py)."""
    pytest.importorskip("sims.mujoco")
    over = ["experiment=mujoco_reach_rgb", "train.num_envs=4", "train.rollout_steps=2", "train.eval_episodes=0",
            "train.progress=false", "cluster=ray", "cluster.placement=pipelined", "cluster.pipeline_stages=2",
            "env.num_threads=1"]
    trainer = Trainer(compose(over), tmp_path)
    trainer.collector.reset(seed=0)
    for _ in range(2):
        batch = trainer.collector.collect()
        assert batch.batch_size == (2, 4) and trainer.collector.failures == 0
    front = batch[keys.OBS]["images", "front"][-1]  # [4 envs, 48, 48, 3]: stage 0's two envs, then stage 1's
    assert not torch.equal(front[:2], front[2:])  # each stage renders its own envs
    trainer.collector.close()


def test_async_collection_is_at_most_max_staleness_old_and_ppo_corrects_it(tmp_path, local_ray):
    trainer = Trainer(compose(SMALL + ["cluster=ray", "cluster.max_staleness=1", "train.total_env_steps=1024"]),
                      tmp_path)
    trainer.learn()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    staleness = [r["train/policy_staleness"] for r in rows if "train/policy_staleness" in r]
    assert staleness == [0] + [1] * 7  # the first collection had no update before it; then one behind
    assert all(torch.isfinite(torch.tensor(r["algo/loss"])) for r in rows if "algo/loss" in r)


def test_async_disaggregated_batches_are_not_refilled_while_the_learner_trains(tmp_path, local_ray):
    """A disaggregated collection runs the single-process Collector in this process, which refills one buffer in
    place: with max_staleness=1 the next collection runs while the learner holds the last batch, so it is a copy."""
    trainer = Trainer(compose(SMALL + ["cluster=ray", "cluster.placement=disaggregated", "cluster.max_staleness=1"]),
                      tmp_path)
    collector = trainer.collector
    try:
        collector.reset(seed=0)
        first = collector.collect()
        kept = first.clone()
        second = collector.collect()  # the collection after it ran meanwhile, and the next one is under way
        collector.pending[0].result()
        assert (first == kept).all()
        assert not torch.equal(first[keys.OBS, keys.STATE], second[keys.OBS, keys.STATE])
    finally:
        collector.close()


def test_a_transformer_policy_syncs_to_a_worker_copy():
    """weights()/load_weights() of the VLA (a transformers backbone with non-persistent rotary buffers): the copy
    takes the learner's weights and acts alike (the rotary buffers, outside state_dict, once stopped every sync)."""
    pytest.importorskip("transformers")
    from embodied.distributed.workers import load_weights, weights
    from policies.vla import VLAConfig, VLAPolicy

    env = ArmReachEnv(ArmReachConfig(), num_envs=3)
    obs, _ = env.reset(seed=0)
    torch.manual_seed(0)
    learner = VLAPolicy(VLAConfig(), env.observation_spec, env.action_spec)
    torch.manual_seed(1)
    worker = VLAPolicy(VLAConfig(), env.observation_spec, env.action_spec)
    assert any(name not in learner.state_dict() for name, _ in learner.named_buffers())  # non-persistent ones exist
    load_weights(worker, weights(learner))
    assert torch.equal(worker.act(obs, deterministic=True).extras["tokens"],
                       learner.act(obs, deterministic=True).extras["tokens"])
    torch.testing.assert_close(worker.act(obs, deterministic=True).value, learner.act(obs, deterministic=True).value)


def test_later_workers_sample_from_a_new_stream_every_collection(tmp_path, local_ray, monkeypatch):
    """Worker 0 samples from the learner's stream; each later worker from one seeded by worker, restart and the
    collection's index (one seed per worker replayed the same action noise in every collection)."""
    from embodied.distributed import collector as module

    seeds = []
    real = module.rng_state
    monkeypatch.setattr(module, "rng_state", lambda seed: seeds.append(seed) or real(seed))
    trainer = Trainer(compose(SMALL + ["cluster=ray", "cluster.env_workers=2"]), tmp_path)
    collector = trainer.collector
    try:
        collector.reset(seed=0)
        for _ in range(3):
            collector.collect()
    finally:
        collector.close()
    assert len(seeds) == 3 and len(set(seeds)) == 3  # worker 1's stream: one per collection, all different


@pytest.mark.slow  # ~35 s: two rounds of worker restarts (test_a_worker_that_raises... covers one in the default suite)
def test_a_killed_worker_is_restarted_and_the_collection_is_whole(tmp_path, local_ray, capsys):
    trainer = Trainer(compose(SMALL + ["cluster=ray", "cluster.env_workers=2"]), tmp_path)
    collector = trainer.collector
    collector.reset(seed=0)
    first = collector.collect()
    pid = ray.get(collector.workers[0].where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)  # the process dies between collections: the next call finds it dead
    second = collector.collect()
    assert second.batch_size == first.batch_size and collector.failures == 1
    assert torch.isfinite(second[keys.REWARD]).all() and (second[keys.POLICY_VERSION] == 1).all()
    assert ray.get(collector.workers[0].where.remote())["pid"] != pid
    collector.workers[1].crash.remote()  # a worker that exits by itself
    assert collector.collect().batch_size == first.batch_size and collector.failures == 2
    assert "restarting the workers" in capsys.readouterr().out
    collector.close()


def test_a_killed_rollout_worker_is_restarted_under_a_pipelined_env_worker(tmp_path, local_ray, capsys):
    """Pipelined: the env worker asks the rollout worker for every step's actions; the rollout worker's death fails
    the env worker's call, and the collection is redone whole once both are back (the handle survives restarts)."""
    trainer = Trainer(compose(SMALL + ["cluster=ray", "cluster.placement=pipelined"]), tmp_path)
    collector = trainer.collector
    collector.reset(seed=0)
    first = collector.collect()
    rollout = collector.rollout_workers[0]
    pid = ray.get(rollout.where.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    second = collector.collect()
    assert second.batch_size == first.batch_size and collector.failures == 1
    assert torch.isfinite(second[keys.REWARD]).all() and (second[keys.POLICY_VERSION] == 1).all()
    assert ray.get(rollout.where.remote())["pid"] != pid and "restarting the workers" in capsys.readouterr().out
    collector.close()


def test_placement_that_the_cluster_cannot_offer_names_the_resources(tmp_path, local_ray):
    over = SMALL + ["cluster=ray", "cluster.env_cpus=3", "cluster.placement_timeout=2"]
    with pytest.raises(ConfigError, match="did not offer the workers' resources.*cluster.env_cpus"):
        Trainer(compose(over), tmp_path)


def test_language_episodes_collect_on_colocated_workers(tmp_path, local_ray):
    pytest.importorskip("transformers")
    from tests.runner.test_language_agent import TINY

    over = TINY + ["train.num_envs=16", "train.eval_episodes=0", "cluster=ray", "cluster.env_workers=2"]
    trainer = Trainer(compose(over), tmp_path)
    batch = trainer.collector.collect()
    assert batch.batch_size == (16,) and batch[keys.GROUP].unique().numel() == 2  # a group of 8 per worker
    assert (batch[keys.POLICY_VERSION] == 0).all() and batch[keys.MASK].any(1).all()
    trainer.algo.update(batch)
    batch[keys.STALENESS] = torch.ones_like(batch[keys.STALENESS])  # one update old now: GRPO decouples per token
    assert all(torch.isfinite(torch.tensor(v)) for v in trainer.algo.update(batch).values())
    trainer.collector.close()


def test_split_placements_refuse_group_rollouts(tmp_path, local_ray):
    with pytest.raises(ConfigError, match="runs cluster.placement=colocated"):
        Trainer(compose(SMALL + ["algo=grpo", "cluster=ray", "cluster.placement=pipelined"]), tmp_path)


@dataclass(frozen=True)
class FailingReachConfig(ArmReachConfig):
    path: str = ""  # the env raises in its step when this file exists (deleting it first)


class FailingReach(ArmReachEnv):
    """arm_reach that raises once inside a worker, triggered from the test process by creating a file."""

    Config = FailingReachConfig

    def step(self, action):
        if self.config.path and os.path.exists(self.config.path):
            os.remove(self.config.path)
            raise RuntimeError("simulated env failure")
        return super().step(action)


def test_a_worker_that_raises_is_restarted_and_training_goes_on(tmp_path, local_ray):
    trigger = tmp_path / "fail"
    over = SMALL + ["env=tests.runner.test_distributed:FailingReach", f"env.path={trigger}", "cluster=ray"]
    trainer = Trainer(compose(over), tmp_path / "run")
    trainer.collector.reset(seed=0)
    trainer.collector.collect()
    trigger.touch()
    batch = trainer.collector.collect()
    assert not trigger.exists() and trainer.collector.failures == 1 and batch.batch_size == (8, 16)
    trainer.collector.close()


def test_off_policy_runs_refuse_cluster_ray_by_name(tmp_path):
    from embodied.runner.pipeline import Pipeline

    with pytest.raises(ConfigError, match="algo=sac learns from a replay buffer in one process: drop cluster=ray"):
        Pipeline(compose(["experiment=arm_reach_sac", "cluster=ray"]), tmp_path)


def test_the_learner_runs_in_an_actor_and_a_bad_config_fails_there_by_name(tmp_path, local_ray):
    from embodied.distributed.config import ClusterConfig
    from embodied.distributed.learner import RemoteLearner

    settings = ClusterConfig(learner="actor", learner_cpus=0.5, env_cpus=0.5)
    learner = RemoteLearner(compose(SMALL + ["cluster=ray", "cluster.learner=actor"]), tmp_path / "run", settings)
    assert learner.where()["pid"] != os.getpid() and learner.iteration == 0
    summary = learner.learn()
    assert summary["env_steps"] == 512 and (tmp_path / "run" / "checkpoints" / "final").is_dir()
    assert ray.is_initialized()  # the test's Ray: the learner did not start it, so it leaves it running
    with pytest.raises(ConfigError, match="train.num_envs=16 must be a multiple of cluster.env_workers=3"):
        RemoteLearner(compose(SMALL + ["cluster=ray", "cluster.env_workers=3"]), tmp_path / "bad", settings)


def test_a_ray_run_resumes_from_its_checkpoint_with_fresh_episodes(tmp_path, local_ray):
    from embodied.runner import checkpoint

    run = tmp_path / "run"
    Trainer(compose(SMALL + ["cluster=ray", "train.total_env_steps=256", "train.checkpoint_every=1"]), run).learn()
    cfg_path = run / "checkpoints" / "latest" / "config.yaml"  # the run was meant to go on: 4 iterations
    cfg_path.write_text(cfg_path.read_text().replace("total_env_steps: 256", "total_env_steps: 512"))
    checkpoint.reseal(cfg_path.parent)
    resumed = Trainer.resume(run)
    assert resumed.iteration == 2 and resumed.collector.seed == 2 and resumed.collector.returned == 2
    resumed.learn()
    assert [i for i, _, _ in curve(run)] == [1, 2, 3, 4]
