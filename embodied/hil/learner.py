"""The learner of a correction session: buffers, off-policy updates, weights for the actor.

    learner = Learner(policy, algo, LearnerConfig())
    learner.add(transitions)          # TensorDict [B] from InterventionActor (in process or over ZeroMQ)
    metrics = learner.train()         # the updates the new data pays for (utd_ratio per transition)

Every row goes into the online buffer; rows with `is_intervention` are also copied into the
demonstration buffer, and batches draw `demo_fraction` from it (HIL-SERL, Luo et al. 2024: RLPD
with the interventions added to the offline buffer; RLPD samples the two 50/50, Ball et al. 2023).

As a process (`python -m embodied.hil.learner settings.json`) it serves an `ActorLink` over
ZeroMQ (`embodied/hil/transport.py`), writes every accepted message to a spool directory before
acknowledging it, and on start reloads the spool: a learner killed and restarted resumes with
every transition the actor ever had acknowledged, and the actor resends the rest.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tensordict import TensorDict

from embodied import keys
from embodied.config import build_config, check
from embodied.data.replay import MixedSampler, ReplayBuffer
from embodied.hil.intervention import POLICY_ACTION, split_interventions


@dataclass(frozen=True)
class LearnerConfig:
    demo_fraction: float = 0.5  # share of each batch from the intervention buffer (RLPD's symmetric sampling)
    min_buffer: int = 256  # transitions before the first update (one batch)
    weights_every: int = 20  # updates between weight broadcasts to the actor
    buffer_capacity: int = 1_000_000  # online replay size (SAC paper Table 1: 10^6)
    max_updates_per_call: int = 200  # bounds one `train` call so the learner keeps answering the actor

    def __post_init__(self):
        check(0.0 <= self.demo_fraction < 1.0, f"learner.demo_fraction={self.demo_fraction} must be in [0, 1)")
        check(self.min_buffer >= 1 and self.weights_every >= 1, "learner.min_buffer and weights_every must be >= 1")
        check(self.buffer_capacity >= 1 and self.max_updates_per_call >= 1, "learner capacities must be >= 1")


class Learner:
    def __init__(self, policy, algo, config: LearnerConfig = LearnerConfig(), seed: int = 0):
        self.policy, self.algo, self.config = policy, algo, config
        device = next(policy.parameters()).device
        self.online = ReplayBuffer(config.buffer_capacity, device)
        self.demos = ReplayBuffer(config.buffer_capacity, device)
        self.generator = torch.Generator().manual_seed(seed)
        self.updates, self.received, self.version, self.credit = 0, 0, 0, 0.0

    def add(self, transitions: TensorDict) -> None:
        transitions = transitions.exclude(POLICY_ACTION)  # the actor's bookkeeping, not a training input
        self.online.extend(transitions)
        human = split_interventions(transitions)
        if human.batch_size[0]:
            self.demos.extend(human)
        self.received += transitions.batch_size[0]
        self.credit += transitions.batch_size[0] * self.algo.config.utd_ratio

    def sample(self, n: int) -> TensorDict:
        if len(self.demos) == 0 or self.config.demo_fraction == 0:
            return self.online.sample(n, self.generator)
        f = self.config.demo_fraction
        return MixedSampler({"demos": self.demos, "online": self.online}, {"demos": f, "online": 1 - f}).sample(n, self.generator)

    def train(self) -> dict[str, float]:
        """Run the updates paid for so far (at most max_updates_per_call); True-ish metrics dict."""
        cfg, algo = self.config, self.algo
        if len(self.online) < max(cfg.min_buffer, algo.config.batch_size):
            self.credit = 0.0  # as the off-policy loop: no debt piles up during the warm-up
            return {}
        actor_every = max(1, round(algo.config.utd_ratio))
        metrics: dict[str, float] = {}
        done = 0
        while self.credit >= 1.0 and done < cfg.max_updates_per_call:
            self.credit -= 1.0
            self.updates += 1
            done += 1
            out = algo.update(self.sample(algo.config.batch_size), update_actor=self.updates % actor_every == 0)
            metrics.update({k: float(v) for k, v in out.items()})
        return metrics

    def weights_due(self) -> bool:
        """True when `weights_every` updates passed since the last broadcast (bumps the version)."""
        if self.updates >= (self.version + 1) * self.config.weights_every:
            self.version = self.updates // self.config.weights_every
            return True
        return False

    def stats(self) -> dict[str, int]:
        return {"updates": self.updates, "received": self.received, "online": len(self.online),
                "demos": len(self.demos), "version": self.version}  # fmt: skip


class TransitionSpool:
    """Accepted messages on disk, one safetensors file each (written whole, then renamed into place)."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def write(self, actor: str, seq: int, transitions: TensorDict) -> None:
        path = self.dir / actor / f"{seq:010d}.safetensors"
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        save_file({k: v.contiguous() for k, v in transitions.flatten_keys("/").items()}, tmp)
        tmp.replace(path)

    def load(self):
        """(actor, seq, TensorDict) of everything stored, in order per actor."""
        for actor_dir in sorted(p for p in self.dir.iterdir() if p.is_dir()):
            for file in sorted(actor_dir.glob("*.safetensors")):
                tensors = load_file(file)
                n = next(iter(tensors.values())).shape[0]
                yield actor_dir.name, int(file.stem), TensorDict(tensors, batch_size=[n]).unflatten_keys("/")

    def next_seq(self) -> dict[str, int]:
        """Per actor, the first sequence number not stored (the stored ones are contiguous from 0)."""
        return {d.name: len(list(d.glob("*.safetensors"))) for d in self.dir.iterdir() if d.is_dir()}


def build_learner(run_config: dict, checkpoint_dir: str | None, learner: dict, seed: int = 0):
    """(policy, Learner) from a run config (env / policy / algo sections) and an optional checkpoint."""
    from embodied import registry
    from embodied.runner import checkpoint
    from embodied.runner.trainer import make_env, make_policy

    torch.set_num_threads(int(run_config.get("threads", 1)))
    env = make_env(run_config, 1, torch.device("cpu"))  # only its specs are needed
    policy = make_policy(run_config, env)
    if checkpoint_dir:
        policy.load_state_dict(checkpoint.load_model(checkpoint.find_checkpoint(Path(checkpoint_dir)), env.device))
    algo_cfg = run_config["algo"]
    algo = registry.build("algo", algo_cfg["name"], {k: v for k, v in algo_cfg.items() if k != "name"}, policy=policy)
    return policy, Learner(policy, algo, build_config(LearnerConfig, learner, "learner"), seed)


def serve(settings: dict, ready=print) -> None:
    """The learner process: accept, store, acknowledge, train, broadcast weights; until SIGTERM.
    `ready(line)` gets one JSON line once it listens (default: printed, for a parent reading stdout)."""
    from embodied.hil.transport import LearnerServer

    policy, learner = build_learner(settings["run_config"], settings.get("checkpoint"), settings.get("learner", {}))
    spool = TransitionSpool(settings["spool"])
    for _actor, _seq, transitions in spool.load():
        learner.add(transitions)
    learner.credit = 0.0  # recovered data was trained on before the restart
    server = LearnerServer(settings["address"], next_seq=spool.next_seq())
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ready(json.dumps({"listening": server.address, **learner.stats()}))
    sys.stdout.flush()
    while not stop:
        for actor, seq, transitions in server.poll(timeout_ms=5):
            spool.write(actor, seq, transitions)
            learner.add(transitions)
            server.ack(actor, seq)
        learner.train()
        server.stats = learner.stats()
        if learner.weights_due():
            server.send_weights(policy.state_dict(), learner.version)
    server.close()


if __name__ == "__main__":
    serve(json.loads(Path(sys.argv[1]).read_text()))
