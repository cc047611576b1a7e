"""The learner as a Ray actor (`cluster.learner=actor`): `embodied train` builds this in place of the runner.

    learner = RemoteLearner(config, run_dir, cluster)   # the Trainer / Pipeline starts in an actor
    summary = learner.learn()                            # runs there; Ray ends with it where this started Ray
"""

from __future__ import annotations

from pathlib import Path

from embodied.distributed.collector import connect, import_ray
from embodied.distributed.config import ClusterConfig
from embodied.distributed.workers import LearnerWorker


class RemoteLearner:
    def __init__(self, config: dict, run_dir: Path, cluster: ClusterConfig):
        ray = self.ray = import_ray()
        # the learner's CPU and the workers' (colocated: env_workers; split: + rollout workers)
        workers = cluster.env_workers * cluster.env_cpus + (
            cluster.rollout_workers * cluster.rollout_cpus if cluster.placement != "colocated" else 0)
        self.started = connect(cluster, cluster.learner_cpus + workers)
        try:
            self.actor = ray.remote(LearnerWorker).options(
                num_cpus=cluster.learner_cpus, num_gpus=cluster.learner_gpus).remote()
            self.iteration, self.env_steps = ray.get(self.actor.build.remote(config, str(run_dir)))
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
