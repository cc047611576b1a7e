"""Issue 20's measurements of `cluster=ray` (embodied/distributed), side by side in one job, interleaved.

    .venv/bin/python benchmarks/bench_distributed.py pipeline     # mujoco_reach_rgb collection: pipelined vs one process
    .venv/bin/python benchmarks/bench_distributed.py pipeline --experiment mujoco_reach_rgb_vla_ppo \
        train.num_envs=32                     # the pixel VLA's, at the 32 envs measured (its experiment now has 256)
    .venv/bin/python benchmarks/bench_distributed.py pipeline --experiment mujoco_reach_rgb_vla_ppo \
        train.num_envs=32 policy.hidden=128 policy.layers=4   # overrides for every arm: a VLA whose act costs its step
    .venv/bin/python benchmarks/bench_distributed.py overhead     # quadrotor_hover PPO iterations: colocated vs plain
    .venv/bin/python benchmarks/bench_distributed.py overhead --rounds 60 --iters 1 \
        --arms "one process;colocated x1;colocated x1, object store"   # some arms, alternating every iteration
    .venv/bin/python benchmarks/bench_distributed.py transfers    # the main job's weights and batch: Ray vs /dev/shm
    .venv/bin/python benchmarks/bench_distributed.py stages       # per-stage costs -> the scaling model's table
    .venv/bin/python benchmarks/bench_distributed.py async        # quadrotor_hover: time to 95% success, staleness 0/1/2
    .venv/bin/python benchmarks/bench_distributed.py cluster      # the 2-node simulated cluster against the model

Each arm is a `Trainer` built from the run config exactly as `embodied train` builds it (cluster=local or
cluster=ray overrides); rounds interleave the arms so the host's noise hits them alike; the table gives each arm's
median env-steps/s with the spread (min-max) over rounds, its ratio to the first arm (median of per-round
ratios) and how busy the host's cores were while it ran. One local Ray instance serves every Ray arm (its start is
not timed; each arm's first collection, which starts the workers, is a warm-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from embodied.cli import compose  # noqa: E402
from embodied.distributed.config import workers_at_normal_priority  # noqa: E402
from embodied.runner.trainer import Trainer  # noqa: E402

RGB = ["experiment=mujoco_reach_rgb", "train.eval_episodes=0", "train.eval_every=0", "train.progress=false"]
# the main job collecting in turn (train.collect_ahead=false), as the Ray arms do: the overhead of Ray, not of the overlap
HOVER = ["experiment=quadrotor_hover", "train.collect_ahead=false", "train.eval_episodes=0", "train.progress=false"]
HALF = ["cluster.env_cpus=0.5", "cluster.rollout_cpus=0.5"]  # three workers on two cores: logical CPUs only
ARMS = {
    "pipeline": {
        "one process": RGB,
        "disaggregated": RGB + ["cluster=ray", "cluster.placement=disaggregated", "cluster.env_workers=2", *HALF],
        "pipelined": RGB + ["cluster=ray", "cluster.placement=pipelined", "cluster.env_workers=2", *HALF],
        "pipelined, 1 env worker x 2 stages": RGB + ["cluster=ray", "cluster.placement=pipelined",
                                                    "cluster.pipeline_stages=2"],
        "pipelined, 2 env workers x 2 stages": RGB + ["cluster=ray", "cluster.placement=pipelined",
                                                     "cluster.env_workers=2", "cluster.pipeline_stages=2", *HALF],
        "colocated x2": RGB + ["cluster=ray", "cluster.env_workers=2"],
        "colocated x2, object store": RGB + ["cluster=ray", "cluster.env_workers=2", "cluster.shared_memory=false"],
    },
    "overhead": {
        "one process": HOVER,
        "colocated x1": HOVER + ["cluster=ray"],
        "colocated x1, object store": HOVER + ["cluster=ray", "cluster.shared_memory=false"],
        "colocated x1 async": HOVER + ["cluster=ray", "cluster.max_staleness=1"],
    },
}


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def cpu_ticks() -> tuple[int, int]:
    """The host's (all, idle + iowait) CPU ticks since boot (/proc/stat): how busy its cores were between two reads."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def throughput(arms: dict[str, list[str]], rounds: int, iters: int, update: bool) -> None:
    """env-steps/s of `iters` collections (and updates, with `update`) per arm per round, interleaved."""
    trainers = {name: Trainer(compose(over), Path(tempfile.mkdtemp())) for name, over in arms.items()}
    for trainer in trainers.values():  # warm-up: workers start, buffers allocate
        trainer.collector.reset(seed=0)
        batch = trainer.collector.collect()
        if update:
            trainer.algo.update(batch)
    rates: dict[str, list[float]] = {name: [] for name in arms}
    busy: dict[str, list[float]] = {name: [] for name in arms}  # % of all the host's cores, during the arm's timing
    for r in range(rounds):
        for name, trainer in trainers.items():
            start, steps, ticks = time.perf_counter(), 0, cpu_ticks()
            for _ in range(iters):
                batch = trainer.collector.collect()
                steps += trainer.collector.count(batch)
                if update:
                    trainer.algo.update(batch)
                    trainer.policy.observe(batch["obs"])
            rates[name].append(steps / (time.perf_counter() - start))
            (total, idle), (total0, idle0) = cpu_ticks(), ticks
            busy[name].append(100 * (1 - (idle - idle0) / max(total - total0, 1)))
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {v[-1]:,.0f}" for n, v in rates.items()), flush=True)
    for trainer in trainers.values():
        if hasattr(trainer.collector, "close"):
            trainer.collector.close()
    first = next(iter(rates))
    print(f"\n| arm | env-steps/s, median (min-max) over {rounds} rounds | ratio to {first} | host cores busy |\n"
          "|---|---|---|---|")
    for name, values in rates.items():
        ratio = statistics.median(v / b for v, b in zip(values, rates[first]))
        print(f"| {name} | {spread(values)} | {ratio:.2f}x | {statistics.median(busy[name]):.0f}% |")


def stages(rounds: int) -> dict[str, float]:
    """Median seconds of each stage of one mujoco_reach_rgb iteration (32 envs x 32 steps), one process."""
    import ray

    trainer = Trainer(compose(RGB), Path(tempfile.mkdtemp()))
    env, policy = trainer.env, trainer.policy
    obs, _ = env.reset(seed=0)
    action = policy.act(obs).action
    batch = trainer.collector.collect()
    times: dict[str, list[float]] = {"env step (render included)": [], "render alone": [], "policy act": [],
                                     "learner update": [], "transfer (put + get of the batch)": []}
    renderer = getattr(env, "renderer", None)  # sims/mujoco: the cameras of every env, one call
    render = None if renderer is None else lambda: renderer.render(env.physics, env.target, env.camera, env.light)
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(10):
            obs, *_ = env.step(action)
        times["env step (render included)"].append((time.perf_counter() - t) / 10)
        if render is not None:
            t = time.perf_counter()
            for _ in range(10):
                render()
            times["render alone"].append((time.perf_counter() - t) / 10)
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(10):
                action = policy.act(obs).action
        times["policy act"].append((time.perf_counter() - t) / 10)
        t = time.perf_counter()
        trainer.algo.update(batch)
        times["learner update"].append(time.perf_counter() - t)
        t = time.perf_counter()
        ray.get(ray.put(batch))
        times["transfer (put + get of the batch)"].append(time.perf_counter() - t)
    costs = {k: statistics.median(v) for k, v in times.items() if v}
    print(f"\nmujoco_reach_rgb, {env.num_envs} envs, {trainer.cfg.rollout_steps} steps per collection, "
          f"batch {batch.numel()} steps ({sum(x.numel() * x.element_size() for x in batch.values(True, True)) / 1e6:.1f} MB)")
    print("| stage | median ms |\n|---|---|")
    for k, v in costs.items():
        print(f"| {k} | {1000 * v:.2f} |")
    return costs


def model(costs: dict[str, float], envs: int = 32, steps: int = 32) -> None:
    """Predicted env-steps/s for W env workers of `envs` envs each (a core each) and G devices, each holding a
    rollout worker and a data-parallel learner replica (ideal split: act and update cost 1/G). A collection is
    `steps` x max(env step, W x act / G) (pipelined: a device serves the env workers' requests in turn) plus the
    batch's transfer; the update of W x envs x steps transitions costs W x update / G. Synchronous: collection,
    then update; asynchronous (max_staleness >= 1): the larger of the two. The costs are this host's CPU ones
    (`stages`): a GPU device makes act and update cheaper by a factor not measured here."""
    env, act, update = costs["env step (render included)"], costs["policy act"], costs["learner update"]
    transfer = costs["transfer (put + get of the batch)"]
    for mode in ("synchronous", "asynchronous"):
        print(f"\npredicted env-steps/s, {mode}; (what saturates: env, policy or learner)")
        print("| env workers W | G=1 | G=2 | G=4 | G=8 |\n|---|---|---|---|---|")
        for w in (1, 2, 4, 8, 16, 32, 64):
            cells = []
            for g in (1, 2, 4, 8):
                collect = steps * max(env, w * act / g) + w * transfer
                learn = w * update / g
                seconds = collect + learn if mode == "synchronous" else max(collect, learn)
                bound = "learner" if learn >= collect else "env" if env >= w * act / g else "policy"
                cells.append(f"{w * envs * steps / seconds:,.0f} ({bound})")
            print(f"| {w} | " + " | ".join(cells) + " |")
    # collection alone, the 32 envs split over 2 env workers (the `pipeline` and `cluster` parts' setting)
    half = steps * max(env / 2, 2 * (act / 2)) + transfer
    print(f"\ncollection alone, {envs} envs: one process {envs * steps / (steps * (env + act)):,.0f} env-steps/s; "
          f"pipelined over 2 env workers of {envs // 2} and one rollout worker, a core each: "
          f"{envs * steps / half:,.0f} env-steps/s predicted (costs linear in the envs per call)")


def time_to_success(rounds: int, target: float = 0.95) -> None:
    """quadrotor_hover to `target` success on 1000 evaluation episodes, checked every 10 iterations: seconds of
    training, synchronous (one process; cluster=ray staleness 0) against asynchronous (staleness 1 and 2)."""
    arms = {"one process": HOVER, "ray sync": HOVER + ["cluster=ray"],
            "ray max_staleness=1": HOVER + ["cluster=ray", "cluster.max_staleness=1"],
            "ray max_staleness=2": HOVER + ["cluster=ray", "cluster.max_staleness=2"]}
    results: dict[str, list[float]] = {name: [] for name in arms}
    for r in range(rounds):
        for name, over in arms.items():
            run = Path(tempfile.mkdtemp())
            trainer = Trainer(compose(over + [f"seed={r}", "train.eval_every=10", "train.eval_episodes=1000"]), run)
            trainer.learn()
            rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            hit = next((row["time"] for row in rows if row.get("eval/success", 0) >= target), float("nan"))
            results[name].append(hit)
            print(f"seed {r}: {name}: {hit:.1f} s to {target:.0%}", flush=True)
    print(f"\n| arm | seconds of training to {target:.0%} success, per seed |\n|---|---|")
    for name, values in results.items():
        print(f"| {name} | {', '.join(f'{v:.1f}' for v in values)} (median {statistics.median(values):.1f}) |")


class Holder:
    """A Ray actor holding a packed main-job batch: returns it through the object store or the learner's block."""

    def __init__(self, batch):
        from embodied.distributed.workers import pack

        self.batch, self.pack = batch, pack

    def give(self, rng, out=None):
        return self.pack(self.batch, out), rng

    def nothing(self, rng):
        return None, rng


def transfers(rounds: int) -> None:
    """Median ms of each leg of a colocated worker's synchronous call on the main job, by path: the weights' put
    (learner), a call taking the random state and answering it back, and one answering the 2.9 MB batch too,
    unpacked into the learner's tensors. 50 calls per leg per round, the legs interleaved."""
    import ray

    from embodied.distributed.shared import SharedBlock, send, size
    from embodied.distributed.workers import pack, rng_wire, to_wire, unpack, weights

    trainer = Trainer(compose(HOVER), Path(tempfile.mkdtemp()))
    trainer.collector.reset(seed=0)
    batch = trainer.collector.collect()
    holder = ray.remote(Holder).remote(batch)
    arrays, leaves = to_wire(weights(trainer.policy)), pack(batch)["leaves"]
    block, out = SharedBlock.make(size(arrays)), SharedBlock.make(size(leaves))
    rng = torch.get_rng_state()
    legs = {"weights: ray.put": lambda: ray.put(arrays), "weights: into shared memory": lambda: send(block.ref, arrays),
            "call, random state as a tensor": lambda: ray.get(holder.nothing.remote(rng)),
            "call, random state as numpy": lambda: ray.get(holder.nothing.remote(rng_wire(rng))),
            "call answering the batch, object store": lambda: unpack(ray.get(holder.give.remote(rng_wire(rng)))[0]),
            "call answering the batch, shared memory":
                lambda: unpack(ray.get(holder.give.remote(rng_wire(rng), out.ref))[0])}
    times: dict[str, list[float]] = {k: [] for k in legs}
    for _ in range(rounds):
        for name, leg in legs.items():
            for _ in range(50):
                t = time.perf_counter()
                leg()
                times[name].append(time.perf_counter() - t)
    block.close(), out.close()
    print(f"\n| leg (quadrotor_hover batch, {sum(v.nbytes for v in leaves.values()) / 1e6:.1f} MB) | "
          f"ms, median (min-max of round medians) |\n|---|---|")
    for name, values in times.items():
        per_round = [statistics.median(values[r * 50:(r + 1) * 50]) * 1e3 for r in range(rounds)]
        print(f"| {name} | {statistics.median(values) * 1e3:.2f} ({min(per_round):.2f}-{max(per_round):.2f}) |")


def two_nodes(rounds: int, iters: int) -> None:
    """mujoco_reach_rgb collection on a 2-node cluster simulated here (1 CPU each), pipelined, one env worker per
    node and the rollout worker beside one of them."""
    from ray.cluster_utils import Cluster

    workers_at_normal_priority()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    import ray

    ray.init(address=cluster.address)
    throughput({"pipelined, 2 nodes": RGB + ["cluster=ray", "cluster.placement=pipelined", "cluster.env_workers=2",
                                             "cluster.strategy=SPREAD", *HALF]}, rounds, iters, update=False)
    ray.shutdown()
    cluster.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("part", choices=["pipeline", "overhead", "transfers", "stages", "async", "cluster"])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=4, help="timed collections (iterations) per arm per round")
    p.add_argument("--cpus", type=int, default=12,
                   help="logical CPUs of the local Ray instance (every arm's workers stay up: the pipeline arms ask 8.5)")
    p.add_argument("--experiment", default="mujoco_reach_rgb",
                   help="the pipeline part's run config (e.g. mujoco_reach_rgb_vla_ppo: a policy step near the env's)")
    p.add_argument("--arms", help="arm names to run, separated by ;, the first the ratios' base (default: all)")
    p.add_argument("overrides", nargs="*", help="config overrides for every arm, e.g. policy.hidden=128 policy.layers=4")
    args = p.parse_intermixed_args()
    torch.set_num_threads(1)
    if args.part == "cluster":
        return two_nodes(args.rounds, args.iters)
    import ray

    workers_at_normal_priority()
    ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, logging_level="WARNING")
    if args.part in ARMS:
        arms = {name: [f"experiment={args.experiment}" if o == RGB[0] else o for o in over] + args.overrides
                for name, over in ARMS[args.part].items()}
        if args.arms:
            names = args.arms.split(";")
            unknown = [n for n in names if n not in arms]
            if unknown:
                p.error(f"--arms {unknown}: the {args.part} part's arms are {list(arms)}")
            arms = {n: arms[n] for n in names}
        throughput(arms, args.rounds, args.iters, update=args.part == "overhead")
    elif args.part == "transfers":
        transfers(args.rounds)
    elif args.part == "stages":
        model(stages(args.rounds))
    else:
        time_to_success(args.rounds)
    ray.shutdown()


if __name__ == "__main__":
    main()
