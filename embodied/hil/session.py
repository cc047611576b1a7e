"""A correction session: a policy acts, a person (or a scripted operator) takes over when it is about
to fail, labels the outcome by key press, rewinds and corrects; a learner trains on it all live.

    embodied correct <run or checkpoint> robot=sim_arm teleop=keyboard [--learner local|none|tcp://host:port]
    embodied correct <run> robot=sim teleop=scripted        # the training sim itself, scripted operator

Robot side: the robot (a registry name or a configs/robot/ preset; `sim` = the training env with
num_envs=1) runs as a `RobotEnv` whose observation model is the training env (deploy's
`TwinAdapter`), stepped by an `InterventionActor`. Keys (keyboard): space takes over / lets go, the
axis keys move the arm, `y` / `n` end the episode as a success / failure, `b` rewinds
`rewind_steps` (a robot drives back along its recorded path through the safety layer, a sim
restores a snapshot) and the operator corrects from there, `q` ends the session.

Labels: the success key gives the episode's last transition reward 1 and ends it (terminated),
the failure key ends it with reward 0 (HIL-SERL's sparse reward from the operator). Every step
is appended to the episode store `<store>/episodes.zarr` with `is_intervention`, the policy's
proposal, `rewound` (rows a rewind abandoned; kept, nothing is deleted), `correction` (operator
rows after a rewind: RaC's correction segment) and the episode's `label` (1 success, 0 failure,
-1 none). The learner gets a row once no rewind can undo it (`rewind_steps` later, or at the episode's end), so
rows a rewind abandons are never trained on as the policy's behaviour. Learner: `local` trains in a thread of this process, a `tcp://` address streams to `python -m embodied.hil.learner`
(CURVE keys from `embodied keys`, `--keys DIR`; `--insecure` for plaintext on loopback only), and
when that learner is lost the actor keeps its last weights (`on_learner_lost=continue`) or holds
the robot still (`hold`, zero action) until it is back; transitions are buffered and resent.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from embodied import keys, registry
from embodied.keys import FAILURE_LABEL, NO_LABEL, SUCCESS_LABEL
from embodied.hil.intervention import POLICY_ACTION, InterventionActor
from embodied.runner import checkpoint

TELEOP_PRESETS = Path(__file__).resolve().parents[2] / "configs" / "teleop"


@dataclass
class SessionSettings:
    robot: str = "sim_arm"  # registry name, configs/robot/ preset, or "sim" (the training env)
    robot_params: dict[str, Any] = field(default_factory=dict)
    teleop: str = "keyboard"  # registry name (kind teleop) or configs/teleop/ preset
    teleop_params: dict[str, Any] = field(default_factory=dict)
    episodes: int = 1
    steps: int = 300  # control steps per episode at most
    control_hz: float | None = None  # None: the training env's rate
    store: Path = Path("corrections")
    learner: str = "local"  # local | none | tcp://host:port
    keys: Path | None = None  # tcp:// learner: the folder from `embodied keys` (this actor's secret key, learner.key)
    insecure: bool = False  # tcp:// learner without keys: plaintext, loopback addresses only
    learner_params: dict[str, Any] = field(default_factory=dict)
    on_learner_lost: str = "continue"  # continue (keep the last weights) | hold (zero action until it returns)
    rewind_steps: int = 20
    reward_classifier: Path | None = None  # a trained success classifier: ends episodes with reward 1 when it fires
    status: bool = True

    def __post_init__(self):
        if self.on_learner_lost not in ("continue", "hold"):
            raise ValueError(f"on_learner_lost={self.on_learner_lost!r}; valid choices: continue, hold")
        if not (self.learner in ("local", "none") or self.learner.startswith("tcp://")):
            raise ValueError(f"learner={self.learner!r}; valid: local, none, tcp://host:port")


def load_teleop(name: str, overrides: dict[str, Any], action_dim: int) -> tuple[str, dict[str, Any]]:
    preset = TELEOP_PRESETS / f"{name}.yaml"
    spec = (yaml.safe_load(preset.read_text()) or {}) if preset.exists() else {"name": name}
    name = spec.pop("name")
    if name not in registry.names("teleop"):
        choices = sorted(set(registry.names("teleop")) | {p.stem for p in TELEOP_PRESETS.glob("*.yaml")})
        raise KeyError(f"unknown teleop {name!r}; valid choices: {', '.join(choices)}")
    return name, {"action_dim": action_dim, **spec, **overrides}


class _Learning:
    """The learner side as the actor sees it: a thread in this process, a process over ZeroMQ, or none.
    Either way the actor acts with its own copy of the weights and takes new ones when they are
    published, so gradient steps never stall the control loop nor change weights mid-action."""

    def __init__(self, settings: SessionSettings, config: dict, ckpt: Path, policy):
        self.settings, self.policy, self.learner, self.link = settings, policy, None, None
        if settings.learner == "local":
            from embodied.hil.learner import build_learner

            # 100k transitions: a 1-2.5 h HIL-SERL session at 10 Hz is 36k-90k (the 10^6 default would
            # allocate ~0.4 GB at the first transition)
            params = {"buffer_capacity": 100_000, **settings.learner_params}
            self.learner_policy, self.learner, _ = build_learner(config, str(ckpt), params)
            self.queue: queue.Queue = queue.Queue()
            self.lock, self.weights, self.version, self.stop = threading.Lock(), None, 0, threading.Event()
            self.thread = threading.Thread(target=self._train, name="hil-learner", daemon=True)
            self.thread.start()
        elif settings.learner.startswith("tcp://"):
            from embodied.hil.transport import ActorLink

            # unacknowledged transitions wait on disk next to the episodes: a restarted session resends them
            self.link = ActorLink(settings.learner, keys=settings.keys, insecure=settings.insecure,
                                  backlog=Path(settings.store) / "outbox")  # fmt: skip

    def _train(self) -> None:
        while not self.stop.is_set():
            try:
                rows = [self.queue.get(timeout=0.05)]
            except queue.Empty:
                continue
            while not self.queue.empty():
                rows.append(self.queue.get_nowait())
            for row in rows:
                self.learner.add(row)
            self.learner.train()
            if self.learner.weights_due():
                weights = {k: v.detach().clone() for k, v in self.learner_policy.state_dict().items()}
                with self.lock:
                    self.weights = weights

    @property
    def alive(self) -> bool:
        return self.link is None or self.link.learner_alive

    def add(self, row) -> None:
        if self.learner is not None:
            self.queue.put(row.exclude(POLICY_ACTION).clone())
        elif self.link is not None:
            self.link.send(row)

    def poll(self) -> None:
        weights = None
        if self.learner is not None:
            with self.lock:
                weights, self.weights = self.weights, None
        elif self.link is not None:
            weights = self.link.poll()
        if weights is not None:
            self.policy.load_state_dict(weights)

    def stats(self) -> dict[str, Any]:
        if self.learner is not None:
            return self.learner.stats()
        if self.link is not None:
            return {**self.link.learner_stats, "unacked": len(self.link.unacked), "alive": self.link.learner_alive}
        return {}

    def close(self) -> None:
        if self.learner is not None:
            self.stop.set()
            self.thread.join(timeout=10)
        if self.link is not None:
            if not self.link.flush(5.0):
                print(f"warning: {len(self.link.unacked)} messages not acknowledged by the learner: {self.link.problem}; "
                      f"they stay in {self.settings.store}/outbox and go out with the next session", file=sys.stderr)
            self.link.close()


class _HoldPolicy:
    """Zero action: the arm's velocity command that keeps it where it is."""

    def __init__(self, policy):
        self.policy = policy

    def act(self, obs, deterministic: bool = False):
        out = self.policy.act(obs, deterministic)
        return out._replace(action=torch.zeros_like(out.action))


def build_env(settings: SessionSettings, config: dict, stack: ExitStack):
    """(env, rewinder, policy-less twin) for `settings.robot`."""
    from embodied.hil.rewind import SnapshotRewinder, TrajectoryRewinder

    if settings.robot == "sim":
        env_params = {k: v for k, v in config["env"].items() if k != "name"}
        env = registry.build("env", config["env"]["name"], {**env_params, "max_episode_steps": settings.steps},
                             num_envs=1)  # fmt: skip
        return env, SnapshotRewinder(settings.rewind_steps)
    env = registry.component("robot_env")(config, settings.robot, settings.robot_params, settings.steps,
                                          settings.control_hz, stack)  # fmt: skip
    return env, TrajectoryRewinder(settings.rewind_steps)


def run_session(path: Path, settings: SessionSettings) -> list[dict[str, Any]]:
    from embodied.data.store import EpisodeStore
    from embodied.build import make_policy

    ckpt = checkpoint.find_checkpoint(path)
    config = checkpoint.load_config(ckpt)
    torch.set_num_threads(int(config.get("threads", 1)))
    summaries = []
    with ExitStack() as stack:
        env, rewinder = build_env(settings, config, stack)
        if settings.reward_classifier is not None:
            from embodied.hil.reward_classifier import ClassifierReward, load_classifier

            env = ClassifierReward(env, load_classifier(settings.reward_classifier))
        policy = make_policy(config, env)
        policy.load_state_dict(checkpoint.load_model(ckpt, env.device))
        if hasattr(getattr(env, "adapter", None), "warm_up"):
            env.adapter.warm_up(policy)  # first calls are ~10x slower: not while the robot waits for commands
        learning = _Learning(settings, config, ckpt, policy)
        stack.callback(learning.close)
        name, params = load_teleop(settings.teleop, settings.teleop_params, env.action_spec.shape[-1])
        if name == "scripted":
            from embodied.hil.operators import scripted_operator

            if settings.robot != "sim":
                raise ValueError("teleop=scripted reads the simulator's state: use it with robot=sim")
            teleop = scripted_operator(env, params)
        else:
            teleop = registry.build("teleop", name, params)
        teleop.connect()
        stack.callback(teleop.disconnect)
        Path(settings.store).mkdir(parents=True, exist_ok=True)
        store = stack.enter_context(EpisodeStore(Path(settings.store) / "episodes.zarr", mode="a"))
        store.set_attrs(session={"checkpoint": str(ckpt), "robot": settings.robot, "teleop": name})
        actor = InterventionActor(env, policy, teleop, deterministic=True)
        status = _Status(settings.status)
        stack.callback(status.close)
        actor.reset(seed=0)
        for episode in range(settings.episodes):
            summary, quit_ = _run_episode(actor, env, rewinder, learning, store, settings, episode, status)
            summaries.append(summary)
            if quit_:
                break
    return summaries


def _run_episode(actor, env, rewinder, learning, store, settings, episode, status) -> tuple[dict, bool]:
    """One episode. A row goes to the learner only once no rewind can undo it (more than `rewind_steps` steps of the
    current path after it, or the episode's end): rows a rewind abandons never train as the policy's behaviour."""
    rows, label, quit_, rewinds, after_rewind = [], NO_LABEL, False, 0, False
    held: list[dict] = []  # the current path's last rows, not yet sent: a rewind may still undo them
    rewinder.clear()
    rewinder.record(env)
    for step in range(settings.steps):
        learning.poll()
        hold = settings.on_learner_lost == "hold" and not learning.alive
        actor.policy = _HoldPolicy(learning.policy) if hold else learning.policy
        if step == 0 and getattr(env, "robot", None) is not None:
            env.robot.resume()  # the watchdog may have held the arm while the last episode was stored
        row, events = actor.step()
        rewinder.record(env)
        if "success" in events or "failure" in events:
            label = SUCCESS_LABEL if "success" in events else FAILURE_LABEL
            row[keys.REWARD] = torch.full_like(row[keys.REWARD], float(label == SUCCESS_LABEL))
            row[keys.TERMINATED] = torch.ones_like(row[keys.TERMINATED])
        human = bool(row[keys.IS_INTERVENTION][0])
        record = {"row": row, "rewound": False, "correction": human and after_rewind, "learn": not hold}
        rows.append(record)
        held.append(record)
        if "rewind" in events and rewinder.available():
            n = min(settings.rewind_steps, rewinder.available())
            actor.obs, _segment = rewinder.rewind(env, n)
            for r in held[-n:]:  # the last n steps of the current path (never rows an earlier rewind abandoned)
                r["rewound"] = True
            del held[-n:]
            rewinds, after_rewind = rewinds + 1, True
        while len(held) > settings.rewind_steps:
            _send(learning, held.pop(0))
        status.update(episode, step, rows, learning, rewinds, hold)
        if "quit" in events:
            quit_ = True
        if label != NO_LABEL or quit_ or bool(row[keys.TERMINATED][0]) or bool(row[keys.TRUNCATED][0]):
            break
    ended = _ending(env, row, label, quit_)
    if label == NO_LABEL and bool(row[keys.SUCCESS][0]):
        label = SUCCESS_LABEL  # a simulator knows its success criterion; a robot needs the key
    for record in held:  # the episode is over: nothing can undo these any more
        _send(learning, record)
    _store_episode(store, rows, label)
    actor.reset()  # the next episode starts from the robot's present state (a robot is not teleported)
    flags = [bool(r["row"][keys.IS_INTERVENTION][0]) for r in rows]
    return {"episode": episode, "steps": len(rows), "label": label, "ended": ended,
            "intervention_rate": float(np.mean(flags)), "rewinds": rewinds, **{f"learner/{k}": v for k, v in learning.stats().items()}}, quit_  # fmt: skip


def _ending(env, row, label: int, quit_: bool) -> str:
    """Why an episode ended, for the operator's summary: a key, the robot's failsafe (a watchdog hold after a stall
    of the control loop, a workspace breach), the environment's termination, or the step limit."""
    if label != NO_LABEL:
        return "success key" if label == SUCCESS_LABEL else "failure key"
    if quit_:
        return "quit key"
    if bool(row[keys.TERMINATED][0]):
        robot = getattr(env, "robot", None)
        if getattr(robot, "failsafe_reason", None):
            return f"failsafe ({robot.failsafe_kind}): {robot.failsafe_reason}"
        return "terminated by the environment"
    return "step limit"  # the loop's end, or the env's truncation at the same count (max_episode_steps=steps)


def _send(learning, record: dict) -> None:
    if record["learn"]:  # rows acted while the robot was held for a lost learner are stored, not learned from
        learning.add(record["row"])


def _store_episode(store, rows: list[dict], label: int) -> None:
    data: dict[str, list] = {}
    for r in rows:
        flat = {k: v[0].cpu().numpy() for k, v in r["row"].flatten_keys("/").items()}
        flat.update({"rewound": np.bool_(r["rewound"]), "correction": np.bool_(r["correction"]), "label": np.int8(label)})
        for k, v in flat.items():
            data.setdefault(k, []).append(np.asarray(v))
    store.append_episode({k: np.stack(v) for k, v in data.items()})


class _Status:
    """One live status line (rich), refreshed at most 4 times a second."""

    def __init__(self, enabled: bool):
        self.live, self.next, self.successes, self.done = None, 0.0, 0, 0
        if enabled:
            from rich.console import Console
            from rich.live import Live

            # a console of its own, on today's stdout: rich's global one may have been made earlier for another
            # stream (a progress bar in the parent of a forked session) and would then never refresh here
            self.live = Live("", refresh_per_second=4, transient=False, console=Console())
            self.live.start()

    def update(self, episode, step, rows, learning, rewinds, hold) -> None:
        if self.live is None or time.monotonic() < self.next:
            return
        self.next = time.monotonic() + 0.25
        human = np.mean([bool(r["row"][keys.IS_INTERVENTION][0]) for r in rows])
        s = learning.stats()
        text = (f"episode {episode} step {step}  intervention {human:.0%}  rewinds {rewinds}  "
                f"learner updates {s.get('updates', '-')}  buffers online {s.get('online', '-')} "
                f"demos {s.get('demos', '-')}" + ("  LEARNER LOST: holding" if hold else ""))  # fmt: skip
        from rich.text import Text

        self.live.update(Text(text))  # plain: no number highlighting

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
