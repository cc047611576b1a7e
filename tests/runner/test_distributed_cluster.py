"""cluster=ray on a multi-node cluster simulated on this machine (ray.cluster_utils.Cluster, 2 nodes of 1 CPU):
workers placed on both nodes, the run reaching the cluster by its address as a user's config would. And first, a
Ray that the run starts itself (no cluster, no test's Ray running yet)."""

import json
import os

import pytest

ray = pytest.importorskip("ray", reason="cluster=ray needs the ray extra")

from embodied.cli import compose  # noqa: E402
from embodied.distributed.config import workers_at_normal_priority  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402
from tests.runner.test_distributed import SMALL  # noqa: E402


def test_the_ray_a_run_starts_runs_its_workers_at_the_run_s_priority(tmp_path, monkeypatch):
    """Ray's default (niceness 15) starves the workers on a busy host: a worker restart beside two busy loops ran
    past 300 s on 2 cores. The run's own Ray starts them at the run's priority."""
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    assert not ray.is_initialized()  # the run starts its own (cluster.address null)
    trainer = Trainer(compose(SMALL + ["cluster=ray", "cluster.num_cpus=2"]), tmp_path)
    try:
        niceness = [os.getpriority(os.PRIO_PROCESS, pid) for pid in trainer.collector.processes]
    finally:
        trainer.collector.close()
    assert niceness == [os.getpriority(os.PRIO_PROCESS, 0)] and not ray.is_initialized()


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    workers_at_normal_priority()

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_env_workers_spread_over_two_nodes_and_train(tmp_path, two_nodes):
    over = SMALL + ["cluster=ray", f"cluster.address={two_nodes.address}", "cluster.env_workers=2",
                    "cluster.strategy=STRICT_SPREAD"]
    trainer = Trainer(compose(over), tmp_path)  # not connected yet: the collector joins the cluster by its address
    collector = trainer.collector
    nodes = {ray.get(w.where.remote())["node"] for w in collector.workers}
    assert nodes == {n["NodeID"] for n in ray.nodes() if n["Alive"]} and len(nodes) == 2
    here = ray.get_runtime_context().get_node_id()
    assert sum(ray.get(w.where.remote())["node"] == here for w in collector.workers) == 1
    trainer.learn()  # closes the workers and disconnects from the cluster, which goes on running
    # weights through Ray's object store (a worker is on the other node); batches too, but for the 3 after the first
    # of the worker on the learner's node (through shared memory)
    assert dict(collector.transfers) == {("weights", "object store"): 4, ("batches", "object store"): 5,
                                         ("batches", "shared memory"): 3}
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "algo/loss" in r] == [1, 2, 3, 4]
    assert not ray.is_initialized() and len(two_nodes.list_all_nodes()) == 2
