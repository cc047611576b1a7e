"""The workers `cluster=ray` places as Ray actors: plain classes, built from the run config in their own process.

    CollectorWorker   colocated: a shard of the envs, a copy of the policy and the single-process collector
                      (Collector, GroupCollector or TextCollector: embodied/runner/trainer.py make_collector);
                      pipelined: a shard of the envs and the single-process Collector, whose policy is a
                      RolloutWorker's (RemotePolicy: one Ray call per env step, worker to worker)
    EnvWorker         disaggregated: a shard of the envs; reset and step
    RolloutWorker     disaggregated / pipelined: a copy of the policy; act and value, one random stream per caller

Weights travel as `weights(policy)` dicts, batches back as `pack`ed ones, both as numpy arrays (to_wire): to and
from a worker on the learner's node through blocks of shared memory the learner owns (embodied/distributed/shared.py,
`cluster.shared_memory`), otherwise through Ray's object store (one `ray.put` of the weights per update, read by
every worker). Each worker's copy loads them with `load_weights`. Random numbers: the learner hands each collection
a generator state (`torch.get_rng_state()` layout, as a numpy array: Ray pickles a tensor more slowly) and takes the
final one back, so a synchronous run with one worker draws exactly the single-process run's numbers.
"""

from __future__ import annotations

import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import torch
from tensordict import TensorDict

from embodied.build import make_algo, make_env, make_policy
from embodied.config import check
from embodied.device import resolve_device
from embodied.distributed.shared import receive, send
from embodied.policy import ActOutput
from embodied.rollout import Collector
from embodied.runner.collectors import make_local_collector


def weights(policy: torch.nn.Module, full: bool = False) -> dict[str, torch.Tensor]:
    """What a copy needs to act as `policy` does now: its trainable parameters and its buffers (observation
    normalizers), or its whole state (`full`: a worker's first sync, when frozen weights came from init_from)."""
    saved = policy.state_dict(keep_vars=True)
    if full:
        return {k: v.detach() for k, v in saved.items()}
    # no copies: `ray.put` serializes them at once, before the learner's next step changes them
    out = {name: p.detach() for name, p in policy.named_parameters() if p.requires_grad}
    # the persistent buffers only: a non-persistent one (a transformer's rotary inv_freq) is rebuilt by every copy
    # and is no entry of state_dict, which load_weights copies into
    out.update({name: b.detach() for name, b in policy.named_buffers() if name in saved})
    return out


@torch.no_grad()
def load_weights(policy: torch.nn.Module, state: dict) -> None:
    """Copy `weights(...)` into a copy of the same policy; a name it lacks is an error, not a silent skip. The
    values may be `to_wire`'s numpy arrays as Ray hands them over, read-only views of its object store: they are
    copied from there once, straight into the policy's own tensors."""
    own = policy.state_dict(keep_vars=True)
    missing = sorted(set(state) - set(own))
    if missing:
        raise KeyError(f"the worker's policy has no {missing[:3]}: it was built from another config")
    with warnings.catch_warnings():  # copy_ only reads the array: its being read-only does not matter here
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        for name, value in state.items():
            own[name].copy_(torch.as_tensor(value))


# dtypes numpy holds: those tensors cross processes as numpy arrays (to_wire)
NUMPY_DTYPES = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.float32, torch.float64}


def to_wire(tensors: dict) -> dict:
    """Tensors as Ray sends fastest: CPU tensors as numpy arrays, the rest as they are. Ray pickles a torch tensor
    through torch's own reduction; a hover collection (10 leaves, 3.2 MB) took ~5.8 ms put + get as a TensorDict
    and ~1.2 ms as numpy; the hover MLP's weights 2.2 against 1.3 ms per put (benchmarks/RESULTS.md). `from_wire`
    takes them back."""
    return {k: v.detach().numpy() if isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dtype in NUMPY_DTYPES
            else v for k, v in tensors.items()}


def from_wire(arrays: dict) -> dict:
    """`to_wire`'s tensors, in writable memory of this process (Ray's numpy arrays are read-only views of its
    object store); weights need no such copy (`load_weights` reads the arrays)."""
    return {k: torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v for k, v in arrays.items()}


def pack(batch: TensorDict, out: dict | None = None) -> dict:
    """A collection's batch for the wire (to_wire), its leaves written into the learner's shared-memory block `out`
    where they fit; `unpack` rebuilds the TensorDict."""
    leaves = to_wire(dict(batch.items(True, True)))
    return {"batch_size": tuple(batch.batch_size), "leaves": (out and send(out, leaves)) or leaves}


def unpack(packed: dict) -> TensorDict:
    batch = TensorDict({}, batch_size=packed["batch_size"])
    for key, value in from_wire(receive(packed["leaves"])).items():
        batch.set(key, value)
    return batch


def rng_wire(state: torch.Tensor) -> np.ndarray:
    """A generator state for a Ray call: a call taking one and answering one took 1.5 ms as numpy, 2.9 ms as tensors
    (benchmarks/RESULTS.md, "Same-node transfers through shared memory")."""
    return state.numpy()


def rng_unwire(state: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(state))  # Ray's arrays are read-only; a state is 5 KB


FINAL = ("final_obs", "_final_obs")  # gymnasium's same-step autoreset entries: a whole observation each step


def _setup(config: dict) -> torch.device:
    torch.set_num_threads(int(config["threads"]))
    torch.manual_seed(config["seed"])  # the same construction order as the learner's (Trainer.__init__)
    return resolve_device(config["device"])


class CollectorWorker:
    """colocated: `num_envs` envs, a policy copy and the collector the single-process Trainer would use. Pipelined
    (`rollout`: a RolloutWorker's handle): the envs and single-process Collectors here, the policy there; the envs
    are split into `stages` groups (RLinf's pipeline_stage_num), each with its own Collector, random stream
    (`stream * stages + s`) and thread, so that while one group's physics and rendering run here the rollout worker
    computes another group's actions. The batch stays here until the collection ends, so a step's observation
    crosses processes once (to the policy) and the learner receives one batch per collection."""

    def __init__(self, config: dict, num_envs: int, rollout=None, stream: int = 0, stages: int = 1):
        device = _setup(config)
        steps = int(config["train"]["rollout_steps"])
        self.threads: list[ThreadPoolExecutor] = []  # pipelined only: there the rollout worker's policy copy acts
        if rollout is not None:
            # a thread per stage for the worker's life: its envs are built, reset and stepped there only (a GL
            # context is current in one thread; another thread's eglMakeCurrent fails with EGL_BAD_ACCESS)
            self.threads = [ThreadPoolExecutor(1) for _ in range(stages)]
            build = lambda s: Collector(make_env(config, num_envs // stages, device),  # noqa: E731
                                        RemotePolicy(rollout, stream * stages + s), steps)
            self.collectors = [t.submit(build, s).result() for s, t in enumerate(self.threads)]
            return
        env = make_env(config, num_envs, device)
        self.policy = make_policy(config, env)
        algo = make_algo(config["algo"], self.policy)  # only for its kind of rollouts (group size)
        self.collectors = [make_local_collector(env, self.policy, algo, num_envs, steps)]

    def collect(self, state: dict | None, rng: np.ndarray, reset_seed: int | None, out: dict | None = None):
        """One rollout with the given weights and random state (`rng_wire`'s): (packed batch, episode stats per
        collector, final random state, this process's id: another one than before means Ray restarted the worker, and
        its envs' state is gone). Pipeline stage s resets from `reset_seed + s`. `out`: the learner's shared-memory
        block for the batch."""
        if not self.threads:  # colocated: this worker's own policy copy
            load_weights(self.policy, receive(state))
        torch.set_rng_state(rng_unwire(rng))

        def run(s: int) -> TensorDict:
            if reset_seed is not None:
                self.collectors[s].reset(seed=reset_seed + s)
            return self.collectors[s].collect()

        if self.threads:  # [T, N / stages] each, their envs side by side as in one env of N
            batch = torch.cat([job.result() for job in [t.submit(run, s) for s, t in enumerate(self.threads)]], 1)
        else:
            batch = run(0)
        stats = [c.pop_episode_stats() for c in self.collectors]
        return pack(batch, out), stats, rng_wire(torch.get_rng_state()), os.getpid()

    def close(self) -> None:
        """Closes the envs, each in the thread that built it (a renderer freed from another thread fails), then ends
        the stage threads; a text env holds nothing to close."""
        for s, collector in enumerate(self.collectors):
            close = getattr(collector.env, "close", None)
            if close is None:
                continue
            if self.threads:
                self.threads[s].submit(close).result()
            else:
                close()
        for thread in self.threads:
            thread.shutdown()

    def where(self) -> dict:
        return where()

    def crash(self) -> None:
        """Ends this worker's process at once, as a killed process would (fault tests)."""
        os._exit(1)


def env_spec(env) -> dict:
    """What a policy copy elsewhere needs of `env` to be built (RolloutWorker), and a ShardedEnv to join shards."""
    return {"num_envs": env.num_envs, "device": str(env.device), "observation_spec": env.observation_spec,
            "action_spec": env.action_spec, "metadata": dict(env.metadata)}


class EnvWorker:
    """disaggregated: `num_envs` envs of the run's config."""

    def __init__(self, config: dict, num_envs: int):
        self.env = make_env(config, num_envs, _setup(config))

    def spec(self) -> dict:
        return env_spec(self.env)

    def reset(self, seed: int | None):
        return self.env.reset(seed=seed)

    def step(self, action: torch.Tensor):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not bool((terminated | truncated).any()):  # final_obs is read only where an episode ended: not sent
            info = {k: v for k, v in info.items() if k not in FINAL}
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.env.close()

    def where(self) -> dict:
        return where()

    def crash(self) -> None:
        os._exit(1)


class RolloutWorker:
    """disaggregated / pipelined: the policy's act() for env workers; each caller (`stream`) has its own random
    stream, so the order in which pipelined callers arrive changes no number."""

    def __init__(self, config: dict, spec: dict):
        _setup(config)
        env = SimpleNamespace(**{**spec, "device": torch.device(spec["device"])})
        self.policy = make_policy(config, env)
        self.streams: dict[int, torch.Tensor] = {}

    def load(self, state: dict) -> int:
        """The learner's weights; returns this process's id (as CollectorWorker.collect does)."""
        load_weights(self.policy, receive(state))
        return os.getpid()

    def seed(self, stream: int, rng: torch.Tensor) -> None:
        self.streams[stream] = rng

    def rng(self, stream: int) -> torch.Tensor:
        return self.streams[stream]

    @torch.no_grad()
    def act(self, stream: int, obs):
        torch.set_rng_state(self.streams[stream])
        out = tuple(self.policy.act(obs))
        self.streams[stream] = torch.get_rng_state()
        return out

    @torch.no_grad()
    def value(self, obs) -> torch.Tensor:
        return self.policy.value(obs)

    def where(self) -> dict:
        return where()

    def crash(self) -> None:
        os._exit(1)


class RemotePolicy:
    """A rollout worker as the single-process Collector's policy, drawing from its own random `stream`."""

    def __init__(self, worker, stream: int):
        import ray

        self._get = ray.get
        self.worker, self.stream = worker, stream

    def act(self, obs: TensorDict, deterministic: bool = False) -> ActOutput:
        check(not deterministic, "rollout workers sample; evaluation runs in the learner")
        return ActOutput(*self._get(self.worker.act.remote(self.stream, obs)))

    def value(self, obs: TensorDict) -> torch.Tensor:
        return self._get(self.worker.value.remote(obs))


def where() -> dict:
    """The node and process a worker runs in (placement tests, the README's cluster check)."""
    import ray

    return {"node": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
