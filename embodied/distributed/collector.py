"""`RayCollector`: the Trainer's collector (the verbs of embodied/rollout.py Collector) over Ray actors.

    collector = RayCollector(config, cluster, policy, Collector, num_envs=4096)   # Trainer builds it (cluster=ray)
    batch = collector.collect()      # the same batch the single-process collector gives, + policy_version

Placement (`cluster.placement`, embodied/distributed/config.py):
    colocated      env_workers x CollectorWorker: each runs the single-process collector on its shard of the envs
    disaggregated  env_workers x EnvWorker + rollout_workers x RolloutWorker, stepped in lock-step by one
                   single-process Collector over them here (ShardedEnv, RemotePolicy)
    pipelined      env_workers x CollectorWorker, each stepping its envs on its own and asking a RolloutWorker
                   for actions (RemotePolicy, worker to worker): while one env worker steps its physics, a
                   rollout worker computes the next actions of another; each returns its batch once, at the end

Staleness: a collection carries the version of the weights it ran with (the learner's update count when it was
launched). With `cluster.max_staleness = s > 0` up to `s` collections run ahead while the learner updates, so a
batch is at most `s` updates old; PPO then corrects for the behaviour policy (embodied/algorithms/ppo.py). With
s = 0 the learner's random state travels with the collection and comes back, so a run with one env worker
reproduces the single-process run exactly (tests/runner/test_distributed.py).

Transfers: weights to workers and batches back cross through blocks of shared memory the learner makes, where every
worker reading the weights (or the worker sending a batch) runs on the learner's node, and through Ray's object store
otherwise (`cluster.shared_memory`, embodied/distributed/shared.py).

Faults: a worker that dies or raises is restarted by Ray (`max_restarts=-1` at Ray's level); the collection it
was part of is dropped whole, every worker resets its envs (fresh episodes) and gets the learner's current
weights, and the collection runs again, up to `cluster.max_restarts` times.
"""

from __future__ import annotations

import os
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import ConfigError, check
from embodied.distributed.config import ClusterConfig, workers_at_normal_priority
from embodied.distributed.shared import MARK, SharedBlock, send, size
from embodied.distributed.workers import (CollectorWorker, EnvWorker, RemotePolicy, RolloutWorker, env_spec, rng_unwire,
                                         rng_wire, to_wire, unpack, weights)
from embodied.registry import MissingExtraError
from embodied.rollout import Collector

SEED_STRIDE = 1_000_003  # worker i's envs reset from seed + i * stride, a restart's from further on


def import_ray():
    try:
        import ray
    except ImportError as err:
        raise MissingExtraError("cluster=ray needs Ray: pip install -e '.[ray]' (scripts/setup.sh installs it)") from err
    return ray


def connect(cluster: ClusterConfig, cpus: float) -> bool:
    """Ray as `cluster.address` says, unless this process is connected already (a test, a Ray worker: the learner
    actor); True when this call started it (whoever started it shuts it down)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    # address "local": a new instance even where another one runs on this machine; at least the CPUs asked for
    local = cluster.num_cpus or max(os.cpu_count() or 1, int(cpus + 0.999))
    workers_at_normal_priority()
    ray.init(address=cluster.address or "local", num_cpus=None if cluster.address else local,
             include_dashboard=False, logging_level="WARNING")
    return True


def rng_state(seed: int) -> torch.Tensor:
    """A CPU generator state (torch.get_rng_state's layout) seeded with `seed`."""
    return torch.Generator().manual_seed(seed % 2**63).get_state()


def join(parts: list, sizes: list[int]):
    """Env outputs of several workers as one batch: tensors and TensorDicts with a leading env dim are
    concatenated, dicts joined key by key, anything else taken from the first worker."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if isinstance(first, dict):
        return {k: join([p[k] for p in parts], sizes) for k in first}
    if isinstance(first, (torch.Tensor, TensorDict)) and first.dim() and first.shape[0] == sizes[0]:
        return torch.cat(parts, 0)
    return first


class WorkerRestarted(RuntimeError):
    """A worker's process is not the one the collector last saw: its envs' state is gone."""


class ShardedEnv:
    """Env workers as one VecEnv for the single-process Collector: actions split by shard, outputs joined."""

    def __init__(self, workers: list, specs: list[dict]):
        ray = import_ray()
        self._get = ray.get
        self.workers, self.sizes = workers, [s["num_envs"] for s in specs]
        self.num_envs, self.device = sum(self.sizes), torch.device(specs[0]["device"])
        self.observation_spec, self.action_spec = specs[0]["observation_spec"], specs[0]["action_spec"]
        self.metadata = specs[0]["metadata"]

    def reset(self, seed: int | None = None):
        seeds = [None if seed is None else seed + i * SEED_STRIDE for i in range(len(self.workers))]
        outs = self._get([w.reset.remote(s) for w, s in zip(self.workers, seeds)])
        return tuple(join([o[j] for o in outs], self.sizes) for j in range(2))

    def step(self, action: torch.Tensor):
        outs = self._get([w.step.remote(a) for w, a in zip(self.workers, action.split(self.sizes))])
        if any("final_obs" in o[4] for o in outs):  # a worker with no episode end sent none (EnvWorker.step)
            for obs, _, done, _, info in outs:
                info.setdefault("final_obs", obs)  # read only where an episode ended: none did here
                info.setdefault("_final_obs", torch.zeros_like(done))
        return tuple(join([o[j] for o in outs], self.sizes) for j in range(5))


class RayCollector:
    def __init__(self, config: dict, cluster: ClusterConfig, policy: torch.nn.Module, kind: type, num_envs: int,
                 rollout_steps: int, env):
        """`env`: the learner's, whose specs build the rollout workers' policy copies (disaggregated, pipelined)."""
        ray = self.ray = import_ray()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.cluster, self.policy, self.kind = cluster, policy, kind
        self.workers: list = []
        self.pending: deque[Future] = deque()
        self.jobs = ThreadPoolExecutor(1)  # collections run one after another, ahead of the learner when async
        n, k = num_envs, cluster.env_workers
        self.stages = cluster.pipeline_stages if cluster.placement == "pipelined" else 1
        check(n % (k * self.stages) == 0, f"train.num_envs={n} must be a multiple of cluster.env_workers={k}"
              + (f" x cluster.pipeline_stages={self.stages}" if self.stages > 1 else ""))
        if cluster.placement != "colocated" and kind is not Collector:
            raise ConfigError(f"cluster.placement={cluster.placement} steps envs and the policy apart, which "
                              f"PPO's env-step rollouts do; {kind.__name__} (GRPO groups, language episodes) runs "
                              "cluster.placement=colocated")
        split = cluster.placement != "colocated"
        bundles = [{"CPU": cluster.env_cpus, "GPU": cluster.env_gpus}] * k
        bundles += [{"CPU": cluster.rollout_cpus, "GPU": cluster.rollout_gpus}] * (cluster.rollout_workers if split else 0)
        bundles = [{r: v for r, v in b.items() if v} or {"CPU": 0.001} for b in bundles]
        self.started = connect(cluster, sum(b.get("CPU", 0) for b in bundles))
        self.group = placement_group(bundles, strategy=cluster.strategy)
        try:
            ray.get(self.group.ready(), timeout=cluster.placement_timeout)
        except ray.exceptions.GetTimeoutError as err:
            self.close()
            raise ConfigError(f"the Ray cluster did not offer the workers' resources {bundles} "
                              f"(strategy {cluster.strategy}) within {cluster.placement_timeout:.0f} s; it has "
                              f"{ray.cluster_resources()}: lower cluster.env_cpus / rollout_cpus / env_workers or "
                              "add nodes") from err

        def actor(cls, index: int, *args):
            bundle = bundles[index]
            return ray.remote(cls).options(
                num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0), max_restarts=-1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index),
            ).remote(*args)

        self.rollout_workers = [actor(RolloutWorker, k + j, config, env_spec(env))
                                for j in range(cluster.rollout_workers)] if split else []  # fmt: skip
        self.lockstep: Collector | None = None
        if cluster.placement == "disaggregated":
            env_workers = [actor(EnvWorker, i, config, n // k) for i in range(k)]
            self.lockstep = Collector(ShardedEnv(env_workers, ray.get([w.spec.remote() for w in env_workers])),
                                      RemotePolicy(self.rollout_workers[0], 0), rollout_steps)
        else:  # colocated: a policy copy in each; pipelined: each env worker's stream in a rollout worker
            remote = [(self._rollout(i), i, self.stages) if split else () for i in range(k)]
            env_workers = [actor(CollectorWorker, i, config, n // k, *remote[i]) for i in range(k)]
        self.env_workers = env_workers
        self.workers = env_workers + self.rollout_workers
        self.seed, self.launched, self.returned, self.failures = 0, 0, 0, 0
        # shared memory with the workers on this node: the weights' when every reader is here, a batch block per env
        # worker here (made once its first batch, through Ray, gives the size), counted by path in `transfers`
        places = ray.get([w.where.remote() for w in self.workers])
        self.processes = [p["pid"] for p in places]  # each worker's pid: a different one later means a restart
        here = ray.get_runtime_context().get_node_id()
        local = [cluster.shared_memory and p["node"] == here for p in places]
        readers = local[k:] if split else local[:k]
        self.weight_blocks: list[SharedBlock | None] | None = None if all(readers) else []  # made by the first send
        self.batch_blocks: list[SharedBlock | None | bool] = [None if near else False for near in local[:k]]
        self.transfers: Counter = Counter()  # (what, "shared memory" | "object store") -> count
        self.fresh = True  # the next collection resets every worker's envs and sends whole weights
        self._stats: list[dict] = []
        self._staleness: list[int] = []

    # --- the collector verbs (embodied/rollout.py) --------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        self.seed, self.fresh = int(seed or 0), True

    def collect(self) -> TensorDict:
        if not self.pending:
            self._launch()
        job = self.pending.popleft()
        while len(self.pending) < self.cluster.max_staleness:  # the next collections run while the learner updates
            self._launch()
        batch, stats, rng, version = job.result()
        if rng is not None:  # synchronous: the learner's random stream continues where the collection left it
            torch.set_rng_state(rng)
        staleness = self.returned - version
        check(staleness <= self.cluster.max_staleness,
              f"a collection {staleness} updates old reached the learner (cluster.max_staleness={self.cluster.max_staleness})")
        self.returned += 1
        self._stats += stats
        self._staleness.append(staleness)
        batch[keys.POLICY_VERSION] = torch.full(batch.batch_size, version, dtype=torch.long)
        batch[keys.STALENESS] = torch.full(batch.batch_size, staleness, dtype=torch.long)
        return batch.to(next(self.policy.parameters()).device)

    def count(self, batch: TensorDict) -> int:
        return self.kind.count(self, batch)  # each collector's count reads the batch alone

    def pop_episode_stats(self) -> dict[str, float]:
        stats, self._stats = [s for s in self._stats if s], []
        out: dict[str, float] = {}
        if stats:
            total = sum(s["episodes"] for s in stats)
            out = {k: sum(s[k] * s["episodes"] for s in stats) / total for k in stats[0] if k != "episodes"}
            out["episodes"] = total
        if self._staleness:
            out["policy_staleness"] = max(self._staleness)
            self._staleness.clear()
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The collections made and the run's seed: a resumed run's workers start fresh episodes (their envs live
        in other processes), from seeds the run has not used."""
        return {"collections": torch.tensor(self.returned), "seed": torch.tensor(self.seed)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.returned = self.launched = int(state["collections"])
        self.seed, self.fresh = int(state["seed"]) + self.returned, True

    def close(self) -> None:
        """Waits for collections in flight, ends the workers, and Ray itself where this run started it."""
        for job in self.pending:
            job.exception()
        self.pending.clear()
        self.jobs.shutdown()
        closing = [w.close.remote() for w in getattr(self, "env_workers", [])]
        self.ray.wait(closing, num_returns=len(closing), timeout=10)  # a dead worker's envs are gone already
        for w in self.workers:
            self.ray.kill(w)
        self.workers = []
        for block in (getattr(self, "weight_blocks", None) or []) + getattr(self, "batch_blocks", []):
            if block:
                block.close()
        self.weight_blocks, self.batch_blocks = [], []
        if hasattr(self, "group"):
            self.ray.util.remove_placement_group(self.group)
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()

    # --- one collection ----------------------------------------------------------------------------
    def _launch(self) -> None:
        """Starts the next collection with the learner's weights as they are now."""
        sync = self.cluster.max_staleness == 0
        rng = torch.get_rng_state() if sync else rng_state(self.seed * SEED_STRIDE + self.launched)
        state = self._send_weights(self.launched, self.fresh)
        job = self.jobs.submit(self._run, state, rng, self.returned, self.fresh, self.launched, sync)
        self.fresh = False
        self.launched += 1
        self.pending.append(job)

    def _run(self, state, rng: torch.Tensor, version: int, fresh: bool, index: int, sync: bool):
        for attempt in range(self.cluster.max_restarts + 1):
            try:
                batch, stats, rng_out = self._collect(state, rng, fresh, index)
                return batch, stats, rng_out if sync else None, version
            except self._failures() as err:
                if attempt == self.cluster.max_restarts:
                    raise RuntimeError(f"collection {index} failed {attempt + 1} times (cluster.max_restarts="
                                       f"{self.cluster.max_restarts}); the last error: {err}") from err
                self.failures += 1
                print(f"a worker failed during collection {index} ({type(err).__name__}); restarting the workers "
                      f"and collecting again with fresh episodes (restart {self.failures})", flush=True)
                self._restart()
                state, fresh = self._send_weights(index, True), True

    def _collect(self, state, rng: torch.Tensor, fresh: bool, index: int):
        """Collection `index`, one rollout from every worker: (batch, episode stats per collector, the first stream's
        random state). Workers after the first sample from a stream of their own per collection (seeded by worker,
        restart and `index`: the same seed every collection replayed the same action noise).
        A worker restarted since the last collection lost its envs' state (Ray may restart a dead worker before
        any call of ours fails), so the collection counts as failed: each worker's process id comes back with its
        batch (rollout workers': with their weights) and is compared; disaggregated env workers are asked."""
        if self.lockstep:
            self._check_processes()
        span = len(self.workers) * self.stages  # the seeds a collection uses; a restart's come after them
        seeds = [self.seed + (i + self.failures * span) * SEED_STRIDE for i in range(span)]
        streams = [rng] + [rng_state(s * SEED_STRIDE + index) for s in seeds[1:]]  # stream 0: the learner's (sync)
        env_workers, rollout_pids = self.env_workers, []
        if self.rollout_workers:  # their weights, and a random stream per caller (env worker i's stage s: i x stages
            callers = 1 if self.lockstep else len(env_workers) * self.stages  # + s; stream 0: the learner's)
            answers = self.ray.get([w.load.remote(state) for w in self.rollout_workers]
                                   + [self._rollout(c // self.stages).seed.remote(c, streams[c]) for c in range(callers)])
            rollout_pids = answers[: len(self.rollout_workers)]  # load's answers; seed's are None
        if self.lockstep:  # disaggregated: the single-process Collector here, over all env workers in lock-step
            if fresh:
                self.lockstep.reset(seed=seeds[0])
            batch = self.lockstep.collect()
            if self.cluster.max_staleness:  # the Collector's own buffer, which the next collection refills in place
                batch = batch.clone()  # while the learner still trains on this one (asynchronous): a copy
            outs = [(batch, [self.lockstep.pop_episode_stats()], None)]
            self._check_processes()
        else:  # colocated (weights to each worker) or pipelined (weights in the rollout workers, loaded above)
            outs = self.ray.get([w.collect.remote(None if self.rollout_workers else state,
                                                  rng_wire(streams[i * self.stages]), seeds[i] if fresh else None,
                                                  self._batch_block(i)) for i, w in enumerate(env_workers)])
            if [o[3] for o in outs] + rollout_pids != self.processes:
                raise WorkerRestarted("a worker's process changed since the last collection (restarted by Ray)")
            for i, o in enumerate(outs):
                self._received(i, o[0]["leaves"])
            outs = [(unpack(o[0]), o[1], rng_unwire(o[2])) for o in outs]
        rng_out = self.ray.get(self._rollout(0).rng.remote(0)) if self.rollout_workers else outs[0][2]
        dim = 1 if self.kind is Collector else 0  # [T, N] env steps, or [B] episodes
        return cat([o[0] for o in outs], dim), [s for o in outs for s in o[1]], rng_out

    # --- transfers -----------------------------------------------------------------------------------------------
    def _send_weights(self, index: int, full: bool):
        """The weights for collection `index`: written into shared-memory block `index % (max_staleness + 1)` (the
        collections that may still read a block are at most max_staleness + 1 consecutive ones: those launched and
        not yet returned), or `ray.put`."""
        arrays = to_wire(weights(self.policy, full=full))
        if self.weight_blocks is None and not full:  # sized for an update's weights; whole ones (a worker's first
            # sync: frozen weights too, e.g. a LoRA run's whole LM) fit only where nothing is frozen
            self.weight_blocks = [SharedBlock.make(size(arrays)) for _ in range(self.cluster.max_staleness + 1)]
        block = self.weight_blocks[index % len(self.weight_blocks)] if self.weight_blocks else None
        message = block and send(block.ref, arrays)
        self.transfers["weights", "shared memory" if message else "object store"] += 1
        return message or self.ray.put(arrays)

    def _batch_block(self, worker: int) -> dict | None:
        """Where env worker `worker` writes its batch: its block (one is enough: collections run one after another,
        and the learner copies a batch out before the next one starts), or None (through Ray)."""
        block = self.batch_blocks[worker]
        return block.ref if block else None

    def _received(self, worker: int, leaves: dict) -> None:
        """Counts the batch's path; a batch that came through Ray from a worker on this node sizes its block (a
        quarter larger: episodes vary in length) for the next ones."""
        shared = MARK in leaves
        self.transfers["batches", "shared memory" if shared else "object store"] += 1
        if shared or self.batch_blocks[worker] is False:
            return
        if self.batch_blocks[worker]:
            self.batch_blocks[worker].close()
        arrays = all(isinstance(v, np.ndarray) for v in leaves.values())  # not so: a batch on a GPU, through Ray
        self.batch_blocks[worker] = arrays and SharedBlock.make(size(leaves) * 5 // 4) or False

    def _rollout(self, caller: int):
        """The rollout worker serving env worker `caller` (disaggregated: the one Collector, caller 0)."""
        return self.rollout_workers[caller % len(self.rollout_workers)]

    def _check_processes(self) -> None:
        if self._processes() != self.processes:
            raise WorkerRestarted("a worker's process changed since the last collection (restarted by Ray)")

    def _processes(self) -> list[int]:
        return [where["pid"] for where in self.ray.get([w.where.remote() for w in self.workers])]

    def _failures(self) -> tuple[type, ...]:
        """A worker's failure as Ray reports it: died, restarting, or raised in its method."""
        errors = self.ray.exceptions
        return errors.RayActorError, errors.ActorUnavailableError, errors.RayTaskError, WorkerRestarted

    def _restart(self) -> None:
        """Every worker restarted and answering again: each one's live process (a dead one's after Ray restarted
        it) is killed, and Ray restarts it; done when every worker answers from a new process. `ray.kill` acts
        asynchronously, so an answer may still come from the old process for a moment: polled, with a deadline."""
        ray = self.ray
        answer = lambda w: ray.get(w.where.options(max_task_retries=-1).remote())["pid"]  # noqa: E731 (retried)
        old = [answer(w) for w in self.workers]
        for w in self.workers:
            ray.kill(w, no_restart=False)
        deadline = time.monotonic() + self.cluster.placement_timeout
        self.processes = []
        for w, pid in zip(self.workers, old):
            while (new := answer(w)) == pid:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a worker was not restarted within {self.cluster.placement_timeout:.0f} s")
                time.sleep(0.05)  # the kill is on its way
            self.processes.append(new)


def cat(batches: list[TensorDict], dim: int) -> TensorDict:
    """Workers' batches as one: env steps [T, N] side by side, or episodes [B] one after another, their token
    axes right-padded with zeros to the longest (attention and masks False there) and their GRPO groups kept
    apart."""
    if len(batches) == 1:
        return batches[0]
    if dim == 0:
        length = max(x.shape[1] for b in batches for x in b.values(True, True) if x.dim() > 1)
        batches = [b.apply(lambda x: pad(x, length)) for b in batches]
        offset = 0
        for b in batches:
            if keys.GROUP in b.keys():
                b[keys.GROUP] = b[keys.GROUP] + offset
                offset = int(b[keys.GROUP].max()) + 1
    return torch.cat(batches, dim)


def pad(x: torch.Tensor, length: int) -> torch.Tensor:
    """[B, L, ...] right-padded with zeros to `length` along L; [B] as it is."""
    if x.dim() < 2 or x.shape[1] == length:
        return x
    return torch.cat([x, x.new_zeros(x.shape[0], length - x.shape[1], *x.shape[2:])], 1)
