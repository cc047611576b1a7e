"""The learner of a correction session: buffers, off-policy updates, weights for the actor.

    learner = Learner(policy, algo, LearnerConfig())
    learner.add(transitions)          # TensorDict [B] from InterventionActor (in process or over ZeroMQ)
    metrics = learner.train()         # the updates the new data pays for (utd_ratio per transition)

Every row goes into the online buffer; rows with `is_intervention` are also copied into the
demonstration buffer, and batches draw `demo_fraction` from it (HIL-SERL, Luo et al. 2024: RLPD
with the interventions added to the offline buffer; RLPD samples the two 50/50, Ball et al. 2023).

As a process (`python -m embodied.hil.learner settings.json`) it serves an `ActorLink` over
ZeroMQ (`embodied/hil/transport.py`; CURVE keys from `embodied keys`), checks every message against
the env's transition schema, writes it durably to a spool directory before acknowledging it, and on
start reloads the spool: a learner killed and restarted resumes with every transition the actor
ever had acknowledged, and the actor resends the rest; nothing is stored twice.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save
from tensordict import TensorDict

from embodied import keys
from embodied.algorithms.utd import UpdateSchedule
from embodied.config import build_config, check
from embodied.hil.durable import fsync_dir, write_durably
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
        horizon = getattr(getattr(policy, "config", None), "horizon", 1)
        check(horizon == 1, f"the correction session's learner trains on single transitions; policy.horizon={horizon} "
              "(an action-chunk critic) trains from the session's store afterwards: embodied train data=<session>")
        device = next(policy.parameters()).device
        self.online = ReplayBuffer(config.buffer_capacity, device)
        self.demos = ReplayBuffer(config.buffer_capacity, device)
        self.generator = torch.Generator().manual_seed(seed)
        self.schedule = UpdateSchedule(algo.config.utd_ratio)  # the off-policy loop's (embodied/algorithms/utd.py)
        self.received, self.version = 0, 0

    @property
    def updates(self) -> int:
        return self.schedule.updates

    def add(self, transitions: TensorDict) -> None:
        transitions = transitions.exclude(POLICY_ACTION)  # the actor's bookkeeping, not a training input
        self.online.extend(transitions)
        human = split_interventions(transitions)
        if human.batch_size[0]:
            self.demos.extend(human)
        self.received += transitions.batch_size[0]
        self.schedule.pay(transitions.batch_size[0])

    def sample(self, n: int) -> TensorDict:
        if len(self.demos) == 0 or self.config.demo_fraction == 0:
            return self.online.sample(n, self.generator)
        f = self.config.demo_fraction
        return MixedSampler({"demos": self.demos, "online": self.online}, {"demos": f, "online": 1 - f}).sample(n, self.generator)

    def train(self) -> dict[str, float]:
        """Run the updates paid for so far (at most max_updates_per_call); True-ish metrics dict."""
        cfg, algo = self.config, self.algo
        if len(self.online) < max(cfg.min_buffer, algo.config.batch_size):
            self.schedule.forgive()  # as the off-policy loop: no debt piles up during the warm-up
            return {}
        metrics: dict[str, float] = {}
        for actor in self.schedule.due(limit=cfg.max_updates_per_call):
            out = algo.update(self.sample(algo.config.batch_size), update_actor=actor)
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
    """Accepted messages on disk, `<dir>/<actor>/<stream>/<seq>.safetensors`, each written whole, fsynced,
    renamed into place and its folder fsynced: a file that exists is complete and survives a crash, so
    an acknowledgement sent after `write` covers only what is durable.

    `check(tensors)` is the learner's gate (LearnerServer's `validate`): a message must carry the
    `required` keys (from the env's specs, `transition_schema`) and, beyond them, exactly the keys,
    dtypes and per-row shapes of the first message accepted (saved in `schema.json`, so a restarted
    learner keeps it). A message that does not match is refused, never stored nor acknowledged: it
    could never go into the same replay buffer, and a stored one would crash every restart.

    `load()` yields the contiguous prefix of each stream and sets `recovered` (the next number
    expected per (actor, stream)); a file it cannot read or that fails `check`, and anything after
    it or after a gap, is moved to `.quarantine/` and named on stderr, so the learner starts instead of
    crash-looping, and the actor resends from there if it still has those messages."""

    def __init__(self, directory: str | Path, required: dict[str, tuple[str | None, list[int]]] | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.required = required or {}
        schema = self.dir / "schema.json"
        self.schema = json.loads(schema.read_text()) if schema.exists() else None
        self.recovered: dict[tuple[str, str], int] = {}

    def check(self, tensors: dict[str, torch.Tensor]) -> str | None:
        """None when `tensors` (flat keys, [B, ...]) can be stored; else why not."""
        got = {k: [_dtype_name(v.dtype), list(v.shape[1:])] for k, v in tensors.items()}
        for key, (dtype, shape) in self.required.items():
            if key not in got:
                return f"transitions lack {key!r} (the learner needs {sorted(self.required)})"
            if (dtype is not None and got[key][0] != dtype) or got[key][1] != list(shape):
                return f"{key!r} is {got[key][0]} {got[key][1]} per row; the learner's env needs {dtype or 'any'} {list(shape)}"
        if self.schema is None:  # the first message fixes the rest of the layout, durably
            self.schema = got
            write_durably(self.dir / "schema.json", json.dumps(got).encode())
        elif got != self.schema:
            diff = sorted(k for k in set(got) | set(self.schema) if got.get(k) != self.schema.get(k))
            return f"transitions differ from this learner's schema at {diff} (see {self.dir / 'schema.json'})"
        return None

    def write(self, actor: str, stream: str, seq: int, transitions: TensorDict) -> None:
        folder = self.dir / actor / stream
        if not folder.is_dir():
            folder.mkdir(parents=True)
            fsync_dir(folder.parent)  # the new folders' entries must be durable too
            fsync_dir(self.dir)
        data = save({k: v.contiguous() for k, v in transitions.flatten_keys("/").items()})
        write_durably(folder / f"{seq:012d}.safetensors", data)

    def load(self):
        """(actor, stream, seq, TensorDict) of everything stored, in order per stream; sets `recovered`."""
        from embodied.hil.transport import unflat

        for tmp in self.dir.rglob("*.tmp"):
            tmp.unlink()  # a write the learner died in: never acknowledged
        for folder in sorted(p for p in self.dir.glob("*/*") if p.is_dir() and p.parent.name != ".quarantine"):
            key, expected = (folder.parent.name, folder.name), 0
            files = sorted(f for f in folder.glob("*.safetensors") if f.stem.isdigit())
            for i, file in enumerate(files):
                reason = None if file.stem == f"{expected:012d}" else f"expected message {expected} here"
                if reason is None:
                    try:
                        tensors = load_file(file)
                        reason = self.check(tensors) if tensors else "empty"
                    except Exception as err:  # noqa: BLE001 - a damaged file, whatever safetensors says
                        reason = f"unreadable ({str(err)[:80]})"
                if reason is not None:
                    self._quarantine(files[i:], reason)
                    break
                yield key[0], key[1], expected, unflat(tensors)
                expected += 1
            self.recovered[key] = expected

    def _quarantine(self, files: list[Path], reason: str) -> None:
        target = self.dir / ".quarantine" / files[0].parent.relative_to(self.dir)
        target.mkdir(parents=True, exist_ok=True)
        for file in files:
            file.replace(target / file.name)
        print(f"warning: spool file {files[0]} {reason}: moved it and the {len(files) - 1} after it to {target}",
              file=sys.stderr)  # fmt: skip


def transition_schema(observation_spec: dict, action_spec) -> dict[str, tuple[str | None, list[int]]]:
    """What every transition from an InterventionActor on this env must carry: key -> (dtype, per-row shape).
    `observation_spec` is flat ("state", "images/wrist"), as the VecEnv contract has it."""
    schema: dict[str, tuple[str | None, list[int]]] = {}
    for name, spec in observation_spec.items():
        schema[f"{keys.OBS}/{name}"] = schema[f"{keys.NEXT_OBS}/{name}"] = (_dtype_name(spec.dtype), list(spec.shape))
    schema[keys.ACTION] = (_dtype_name(action_spec.dtype), list(action_spec.shape))
    schema[keys.REWARD] = (None, [])  # any float width: the env's
    for key in (keys.TERMINATED, keys.TRUNCATED, keys.IS_INTERVENTION):
        schema[key] = ("bool", [])
    return schema


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")  # "float32": the name numpy and the wire format use


def build_learner(run_config: dict, checkpoint_dir: str | None, learner: dict, seed: int = 0):
    """(policy, Learner, transition schema) from a run config (env / policy / algo sections) and an optional checkpoint."""
    from embodied.build import make_algo, make_env, make_policy
    from embodied.runner import checkpoint

    torch.set_num_threads(int(run_config.get("threads", 1)))
    env = make_env(run_config, 1, torch.device("cpu"))  # only its specs are needed
    policy = make_policy(run_config, env)
    if checkpoint_dir:
        policy.load_state_dict(checkpoint.load_model(checkpoint.find_checkpoint(Path(checkpoint_dir)), env.device))
    algo = make_algo(run_config["algo"], policy)
    schema = transition_schema(env.observation_spec, env.action_spec)  # what `serve` accepts
    return policy, Learner(policy, algo, build_config(LearnerConfig, learner, "learner"), seed), schema


def serve(settings: dict, ready=print) -> None:
    """The learner process: accept, store, acknowledge, train, broadcast weights; until SIGTERM.
    `settings`: run_config, spool, address (default tcp://127.0.0.1:5555), keys (a folder from `embodied
    keys`) or insecure: true (plaintext, loopback only), optional checkpoint and learner (LearnerConfig).
    `ready(line)` gets one JSON line once it listens (default: printed, for a parent reading stdout)."""
    from embodied.hil.transport import LearnerServer

    policy, learner, schema = build_learner(settings["run_config"], settings.get("checkpoint"),
                                            settings.get("learner", {}))  # fmt: skip
    spool = TransitionSpool(settings["spool"], required=schema)
    for _actor, _stream, _seq, transitions in spool.load():
        learner.add(transitions)
    learner.schedule.forgive()  # recovered data was trained on before the restart
    server = LearnerServer(settings.get("address", "tcp://127.0.0.1:5555"), keys=settings.get("keys"),
                           insecure=bool(settings.get("insecure", False)), next_seq=spool.recovered,
                           validate=spool.check)  # fmt: skip
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ready(json.dumps({"listening": server.address, **learner.stats()}))
    sys.stdout.flush()
    while not stop:
        for actor, stream, seq, transitions in server.poll(timeout_ms=5):
            spool.write(actor, stream, seq, transitions)  # durable first: an ack must survive a crash
            learner.add(transitions)
            server.ack(actor, stream, seq)
        learner.train()
        server.stats = learner.stats()
        if learner.weights_due():
            server.send_weights(policy.state_dict(), learner.version)
    server.close()


if __name__ == "__main__":
    serve(json.loads(Path(sys.argv[1]).read_text()))
