"""The learner as a Ray actor (`cluster.learner=actor`): `embodied train` builds this in place of the runner.

    learner = RemoteLearner(config, run_dir, cluster)   # the Trainer / Pipeline starts in an actor (or resumes:
                                                         # config["resume"], with the command line's budget)
    summary = learner.learn()                            # runs there; Ray ends with it where this started Ray
"""

from __future__ import annotations

from pathlib import Path

from embodied.distributed.collector import connect, import_ray
from embodied.distributed.config import ClusterConfig
from embodied.distributed.workers import where


class RemoteLearner:
    def __init__(self, config: dict, run_dir: Path, cluster: ClusterConfig, budget: dict | None = None):
        ray = self.ray = import_ray()
        # the learner's CPU and the workers' (colocated: env_workers; split: + rollout workers)
        workers = cluster.env_workers * cluster.env_cpus + (
            cluster.rollout_workers * cluster.rollout_cpus if cluster.placement != "colocated" else 0)
        self.started = connect(cluster, cluster.learner_cpus + workers)
        try:
            self.actor = ray.remote(LearnerWorker).options(
                num_cpus=cluster.learner_cpus, num_gpus=cluster.learner_gpus).remote()
            self.iteration, self.env_steps = ray.get(self.actor.build.remote(config, str(run_dir), budget))
        except BaseException:
            self.close()
            raise

    def where(self) -> dict:
        return self.ray.get(self.actor.where.remote())

    def learn(self) -> dict:
        try:
            return self.ray.get(self.actor.learn.remote())
        finally:
            self.close()

    def close(self) -> None:
        if hasattr(self, "actor"):
            self.ray.kill(self.actor)
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()


class LearnerWorker:
    """cluster.learner=actor: the run's runner (Trainer, Pipeline) in a Ray actor; its collection workers are
    actors it starts in turn."""

    def build(self, config: dict, run_dir: str, budget: dict | None = None) -> tuple[int, int]:
        """The runner, new or resumed; its (iteration, env_steps). A method, not __init__, so that a bad config's
        error reaches the caller as itself (ConfigError), not as a dead actor."""
        from embodied.runner.pipeline import runner_class

        resume = config.get("resume")
        self.runner = runner_class(resume).resume(resume, budget) if resume else runner_class(config)(config, run_dir)
        return self.runner.iteration, self.runner.env_steps

    def learn(self) -> dict:
        return self.runner.learn()

    def where(self) -> dict:
        return where()
