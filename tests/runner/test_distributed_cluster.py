"""cluster=ray on a multi-node cluster simulated on this machine (ray.cluster_utils.Cluster, 2 nodes of 1 CPU):
workers placed on both nodes, the run reaching the cluster by its address as a user's config would."""

import json

import pytest

ray = pytest.importorskip("ray", reason="cluster=ray needs the ray extra")

from embodied.cli import compose  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402
from tests.runner.test_distributed import SMALL  # noqa: E402


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

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
    trainer.learn()  # closes the workers and disconnects from the cluster, which goes on running
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if "algo/loss" in r] == [1, 2, 3, 4]
    assert not ray.is_initialized() and len(two_nodes.list_all_nodes()) == 2
