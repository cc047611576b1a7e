"""The `cluster` config group: where a run's workers live. Imports nothing of Ray.

    embodied train experiment=quadrotor_hover                       # cluster=local: one process (the default)
    embodied train experiment=quadrotor_hover cluster=ray cluster.env_workers=2
    embodied train ... cluster=ray cluster.placement=pipelined cluster.env_workers=2   # physics overlaps inference
    embodied train ... cluster=ray cluster.address=auto             # join the Ray cluster this machine belongs to
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from embodied.config import check

Placement = Literal["colocated", "disaggregated", "pipelined"]
Strategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]


@dataclass(frozen=True)
class ClusterConfig:
    """`cluster=ray`: the run's collection on Ray actors; the learner stays in the `embodied train` process."""

    # null: start Ray on this machine for the run; "auto": the cluster this machine is part of (`ray start`);
    # "ray://host:10001": a remote cluster through Ray Client
    address: str | None = None
    # logical CPUs of a Ray started for the run (null: this machine's count, raised to what the placement asks)
    num_cpus: int | None = None
    # colocated: each env worker holds its envs and a policy copy and collects alone (today's loop, sharded);
    # disaggregated: env workers step, rollout workers act, in lock-step; pipelined: each env worker runs its own
    # collection, asking a rollout worker for actions, so one worker's physics overlaps another's inference (RLinf's
    # pipeline_stage_num)
    placement: Placement = "colocated"
    env_workers: int = 1  # actors holding train.num_envs / env_workers envs each
    # pipelined: each env worker's envs in this many groups, each stepping in its own thread, so that one group's
    # physics and rendering overlap the rollout worker's inference for another (RLinf's pipeline_stage_num)
    pipeline_stages: int = 1
    rollout_workers: int = 1  # disaggregated / pipelined: actors holding a copy of the policy for act()
    # a collection may use weights up to this many updates old (0: synchronous, the single-process run's curve);
    # >0 collects the next rollouts while the learner updates, PPO then corrects for the behaviour policy
    max_staleness: int = 0
    strategy: Strategy = "PACK"  # Ray placement group strategy over the workers' bundles (SPREAD: across nodes)
    env_cpus: float = 1.0  # Ray resources per env worker (and per colocated worker)
    env_gpus: float = 0.0
    rollout_cpus: float = 1.0  # per rollout worker
    rollout_gpus: float = 0.0
    # driver: the learner (update, checkpoints, evaluation) runs in the `embodied train` process; actor: in a Ray
    # actor with learner_cpus / learner_gpus (e.g. a GPU node), writing the run directory where it runs
    learner: Literal["driver", "actor"] = "driver"
    learner_cpus: float = 1.0
    learner_gpus: float = 0.0
    # weights and batches to and from workers on the learner's node through shared memory (/dev/shm), past Ray's
    # object store (a call answering the main job's batch: 2.9 ms against 5.1; embodied/distributed/shared.py);
    # false: everything through the object store
    shared_memory: bool = True
    max_restarts: int = 3  # a dead or failing worker is restarted this often per collection before the run stops
    placement_timeout: float = 120.0  # seconds to wait for the cluster to offer the workers' resources

    def __post_init__(self):
        check(self.env_workers >= 1, f"cluster.env_workers={self.env_workers} must be >= 1")
        check(self.pipeline_stages >= 1, f"cluster.pipeline_stages={self.pipeline_stages} must be >= 1")
        check(self.rollout_workers >= 1, f"cluster.rollout_workers={self.rollout_workers} must be >= 1")
        check(self.max_staleness >= 0, f"cluster.max_staleness={self.max_staleness} must be >= 0")
        check(min(self.env_cpus, self.env_gpus, self.rollout_cpus, self.rollout_gpus, self.learner_cpus,
                  self.learner_gpus) >= 0, "cluster.*_cpus and cluster.*_gpus must be >= 0")
        check(self.max_restarts >= 0, f"cluster.max_restarts={self.max_restarts} must be >= 0")
        check(self.num_cpus is None or self.num_cpus >= 1, f"cluster.num_cpus={self.num_cpus} must be >= 1 or null")


def workers_at_normal_priority() -> None:
    """Call before starting Ray on this machine. Ray starts its worker processes at niceness 15 (RayConfig's
    `worker_niceness`), beneath the learner and anything else running here. On a busy host they then all but stop.
    Two busy loops beside tests/runner/test_distributed.py on 2 cores: workers at 15 needed 18 min for 10 tests
    and a worker restart then ran past 300 s; at 0 the file took ~2 min (benchmarks/RESULTS.md). A Ray this
    process starts (a run's, a sweep's, the tests') runs its workers at 0 unless $RAY_worker_niceness says
    otherwise. A cluster started with `ray start` keeps its own setting: start it with RAY_worker_niceness=0."""
    os.environ.setdefault("RAY_worker_niceness", "0")
