"""Collect the next rollout in a second process while this one updates on the last (`train.collect_ahead=true`).

    collector = AheadCollector(Collector(env, copy_of_policy, steps), policy)   # the Trainer's make_collector does this
    batch = collector.collect()     # rollout k; the worker is already collecting k + 1

On the 2-core machine the main job's iteration is a collection (sim + policy, ~20 ms) and then an update (~47 ms)
on one core, the other idle. Here a forked worker process owns the VecEnv and a copy of the policy. While the learner
updates on rollout k, the worker collects rollout k + 1 with the weights the learner had before that update, so every
batch after the first is one update old (`keys.STALENESS` = 1) and PPO takes its behaviour-corrected path (decoupled
PPO and the current critic's values: embodied/algorithms/ppo.py), as with `cluster=ray cluster.max_staleness=1`.
Threads in one process do not overlap here: the collection's small ops hold the GIL (1.1x, measured).

Deterministic whatever the timing: rollout k + 1 is always collected with the weights before update k, the worker's
random stream (action noise) is its own, seeded from the learner's stream when it starts, and the learner's stream
(minibatch order) is untouched by the worker. A checkpoint holds the rollout in flight with the worker's env, episode
and random state, so a resumed run goes on exactly. The actor's weights are shared memory (the learner writes them
while the worker waits for its next command); so is the rollout buffer, shared once and copied out after each
collection. CPU only, Linux (fork), on-policy env-step rollouts (PPO), an env with get_state snapshots that declares
it survives a fork (`VecEnv.fork_safe`: the torch sims, and MuJoCo envs without cameras, whose stepping pool is made
anew in the worker: the parent's hung it);
each process runs one torch thread.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import traceback

import torch
from tensordict import TensorDict

from embodied import keys
from embodied.config import check
from embodied.distributed.workers import load_weights
from embodied.rollout import Collector


def _serve(conn, collector: Collector, seed: int, rng: torch.Tensor | None) -> None:
    """The worker: collect on command, report the collector's state on command; an error goes back to the learner."""
    import torch.multiprocessing  # noqa: F401  (its picklers send tensors through shared memory)

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    if rng is not None:
        torch.set_rng_state(rng)
    shared = False
    while (command := conn.recv()) != "close":
        try:
            if command == "collect":
                batch = collector.collect()  # the collector's buffer, refilled in place by each collection
                # the finished episodes' rows as one array, pickled by value (a tensor would get a shared-memory file)
                rows = torch.cat(collector._finished).numpy() if collector._finished else None
                collector._finished.clear()
                conn.send((None if shared else batch, rows))  # sent once: pickling moves the buffer to shared memory
                shared = True
            else:  # "state"
                conn.send({**_snapshot(collector), "worker_rng": torch.get_rng_state()})
        except Exception:  # noqa: BLE001  (any error of the env or the policy, with its traceback)
            conn.send(_WorkerError(traceback.format_exc()))
            return


def _snapshot(collector: Collector) -> dict[str, torch.Tensor]:
    """The collector's state and its env's ("env." keys): where the worker's episodes stand."""
    return {**collector.state_dict(), **{f"env.{k}": v for k, v in collector.env.get_state().items()}}


def unavailable(env, cluster: str) -> str | None:
    """Why this run cannot collect ahead (a notice; the run then collects in its own process), or None."""
    if cluster != "local":
        return f"is for one machine's cores; cluster={cluster} runs its collection on its workers (with " \
               "cluster.max_staleness=1 for the same overlap)"
    if not sys.platform.startswith("linux"):
        return f"forks a worker process, on Linux only (this is {sys.platform})"
    if not getattr(env, "fork_safe", False):
        return f"forks a worker process to step the envs, and {type(env).__name__} is not marked as surviving a fork " \
               "(VecEnv.fork_safe: no native threads or GL context of its own)"
    if env.device.type != "cpu":
        return f"overlaps two CPU processes; on {env.device} the kernels already run apart from the host"
    if len(os.sched_getaffinity(0)) < 2:
        return "overlaps two processes, and this process may run on one CPU core only"
    if torch.get_num_threads() != 1:
        return f"runs one torch thread in each of two processes; this run has threads={torch.get_num_threads()}"
    try:
        env.get_state()
    except NotImplementedError:
        return f"keeps the worker's env in each checkpoint, and {type(env).__name__} has no get_state snapshots"
    return None


class _WorkerError:
    def __init__(self, text: str):
        self.text = text


class AheadCollector:
    """A Collector's verbs (reset, collect, count, pop_episode_stats, state_dict, load_state_dict, close) for the
    Trainer, with the collection one rollout ahead in a worker process. `collector` acts with its own copy of
    `policy` (the learner's), whose weights this copies in before each collection."""

    def __init__(self, collector: Collector, policy: torch.nn.Module):
        check(collector.policy is not policy, "AheadCollector's collector needs its own copy of the policy")
        self.inner, self.policy = collector, policy
        self.actor = collector.policy.share_memory()  # the worker reads the weights the learner writes
        self.env = collector.env
        self._proc = self._conn = self._shared = None
        self._ready: tuple[TensorDict, list] | None = None  # a rollout collected, not yet returned
        self._in_flight = False
        self._worker_rng: torch.Tensor | None = None  # from a checkpoint: the worker's random state

    # --- the worker ------------------------------------------------------------------------
    def _start(self) -> None:
        # the worker's random stream: seeded from the learner's at the run's start, or as a checkpoint left it
        seed = int(torch.randint(2**62, ())) if self._worker_rng is None else 0
        context = mp.get_context("fork")
        parent, child = context.Pipe()
        self._proc = context.Process(
            target=_serve, args=(child, self.inner, seed, self._worker_rng), daemon=True, name="collect-ahead")
        self._proc.start()
        child.close()
        self._conn = parent

    def _call(self, command: str):
        self._send(command)
        return self._receive()

    def _send(self, command: str) -> None:
        try:
            self._conn.send(command)
        except (BrokenPipeError, ConnectionResetError):
            self._died()

    def _receive(self):
        try:
            message = self._conn.recv()
        except (EOFError, ConnectionResetError):
            self._died()
        if isinstance(message, _WorkerError):
            self._proc.join(timeout=10)
            self._proc = None
            raise RuntimeError(f"the train.collect_ahead worker failed:\n{message.text}")
        return message

    def _died(self):
        self._proc.join(timeout=10)
        code, self._proc = self._proc.exitcode, None
        raise RuntimeError(f"the train.collect_ahead worker process died (exit code {code}); the run's last "
                           "checkpoint resumes it (embodied train resume=<run dir>)") from None

    def _launch(self) -> None:
        """The next collection, with the learner's weights as they are now."""
        load_weights(self.actor, self.policy.state_dict())  # into the shared memory the worker reads
        self._send("collect")
        self._in_flight = True

    def _land(self) -> None:
        """Wait for the collection in flight; copy it out of the buffer the worker refills."""
        if self._in_flight:
            batch, rows = self._receive()
            if batch is not None:  # the first: the worker's buffer itself, in shared memory
                self._shared = batch
            self._ready = (self._shared.clone(), [] if rows is None else [torch.from_numpy(rows)])
            self._in_flight = False

    # --- the Collector's verbs ---------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        check(self._proc is None, "AheadCollector.reset: the worker has started; reset before the first collect")
        self.inner.reset(seed)

    def collect(self) -> TensorDict:
        if self._proc is None:
            self._start()
        self._land()
        staleness = 1
        if self._ready is None:  # the first: collected now, with the current weights
            self._launch()
            self._land()
            staleness = 0
        batch, rows = self._ready
        self._ready = None
        self.inner._finished.extend(rows)  # the worker's finished episodes, counted where this process reads them
        self._launch()
        batch[keys.STALENESS] = torch.full(batch.batch_size, staleness, dtype=torch.long)
        return batch

    def count(self, batch: TensorDict) -> int:
        return self.inner.count(batch)

    def pop_episode_stats(self) -> dict[str, float]:
        return self.inner.pop_episode_stats()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The worker's collector, env and random state, with the rollout it has collected ahead."""
        if self._proc is None:
            state = _snapshot(self.inner)
            if self._worker_rng is not None:
                state["worker_rng"] = self._worker_rng
        else:
            self._land()
            state = self._call("state")
        if self._ready is not None:
            batch, rows = self._ready
            state.update({f"ahead.{k}": v for k, v in batch.flatten_keys(".").items()})
            state["ahead_episodes"] = torch.cat(rows) if rows else torch.zeros(0, 3)
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        check(self._proc is None, "AheadCollector.load_state_dict: load before the first collect")
        self.env.set_state({k[len("env."):]: v for k, v in state.items() if k.startswith("env.")})
        self.inner.load_state_dict({k: v for k, v in state.items()
                                    if not k.startswith(("env.", "ahead.", "ahead_episodes", "worker_rng"))})
        self._worker_rng = state.get("worker_rng")
        ahead = {k[len("ahead."):]: v for k, v in state.items() if k.startswith("ahead.")}
        if ahead:
            size = next(iter(ahead.values())).shape[:2]
            episodes = state["ahead_episodes"]
            self._ready = (TensorDict(ahead, batch_size=size).unflatten_keys("."), [episodes] if len(episodes) else [])

    def close(self) -> None:
        """Stop the worker; its state comes back first, so a later collect goes on where it left off."""
        if self._proc is None:
            return
        state = self.state_dict()
        self._send("close")
        self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.kill()
        self._proc = self._conn = self._shared = None
        self.load_state_dict(state)
