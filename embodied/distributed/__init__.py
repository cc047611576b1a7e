"""Collection beyond one process, on Ray (`cluster=ray`; embodied/distributed/config.py for the settings).

    config.py      ClusterConfig: the `cluster` config group (imports nothing of Ray)
    workers.py     CollectorWorker, EnvWorker, RolloutWorker: plain classes Ray runs as actors
    collector.py   RayCollector: the Trainer's collector over those workers (placement, staleness, faults)
    shared.py      SharedBlock: shared memory for weights and batches to and from workers on the learner's node

Without `cluster=ray` nothing here is imported and the Trainer runs its single-process loop.
"""
