"""Chaos on the actor/learner link (issue 15, defect 1): the learner process is SIGKILLed at random moments
(during the stream, during its restart) and the actor process now and then too, while an ActorLink streams
transitions with a unique `uid` each. Afterwards the learner's spool holds every transition exactly once.

The learner is the real `serve` loop and spool (`python -m embodied.hil.learner`'s code path), forked so that
a restart takes well under a second; the actor keeps its backlog in an outbox folder, as a correction session
does (`<store>/outbox`), and a restarted actor goes on from what its outbox and its reports say it queued."""

import json
import multiprocessing
import os
import signal
import socket
import time

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from embodied.hil.learner import TransitionSpool
from embodied.hil.transport import ActorLink, decode

FORK = multiprocessing.get_context("fork")


def _row(uid: int) -> TensorDict:
    """One arm_reach transition (the learner checks it against the env's specs), identified by `uid`."""
    obs = lambda: {"state": torch.randn(1, 26), "privileged": torch.randn(1, 10), "language": torch.zeros(1, 64, dtype=torch.uint8)}  # noqa: E731
    flag = torch.zeros(1, dtype=torch.bool)
    return TensorDict({"obs": obs(), "next_obs": obs(), "action": torch.randn(1, 4), "reward": torch.zeros(1),
                       "terminated": flag, "truncated": flag, "is_intervention": flag, "uid": torch.tensor([uid])}, [1])  # fmt: skip


def _learner_main(settings: dict, conn) -> None:
    from embodied.hil.learner import serve

    serve(settings, ready=conn.send)


def _start_learner(settings: dict):
    parent, child = FORK.Pipe()
    proc = FORK.Process(target=_learner_main, args=(settings, child), daemon=True)
    proc.start()
    assert parent.poll(60), "learner did not start"
    return proc, json.loads(parent.recv())


def _actor_main(address: str, backlog: str, start: int, total: int, conn) -> None:
    """Queue uids start..total-1, reporting each once `send` returned (then it is the link's to deliver)."""
    link = ActorLink(address, "arm-0", insecure=True, backlog=backlog, resend_s=0.05, timeout_s=0.5, window=64)
    in_outbox = [int(decode(frames)[2]["uid"][0]) for frames in link.unacked.values()]
    for uid in in_outbox:  # queued by the last incarnation, which may have died before reporting them
        conn.send(uid)
    for uid in range(max([start, *(u + 1 for u in in_outbox)]), total):
        while len(link.unacked) >= 200:  # the robot does not outrun a learner that is away for long
            link.poll()
            link.socket.poll(5)
        link.send(_row(uid))
        conn.send(uid)
        link.poll()
    conn.send(("done", link.flush(120.0), link.problem))


def _start_actor(address, backlog, start, total):
    parent, child = FORK.Pipe(duplex=False)
    proc = FORK.Process(target=_actor_main, args=(address, str(backlog), start, total, child), daemon=True)
    proc.start()
    return proc, parent


def _kill(proc) -> None:
    os.kill(proc.pid, signal.SIGKILL)  # no clean shutdown: whatever was in flight or half written is lost
    proc.join()


def _chaos(tmp_path, seed: int, total: int, learner_kills: int, actor_kills: int) -> dict:
    rng = np.random.default_rng(seed)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    run_config = {"env": {"name": "arm_reach"}, "threads": 1, "algo": {"name": "sac", "batch_size": 16},
                  "policy": {"name": "sac_mlp", "actor_hidden": [16], "critic_hidden": [16]}}  # fmt: skip
    settings = {"run_config": run_config, "address": address, "spool": str(tmp_path / "spool"), "insecure": True,
                "learner": {"min_buffer": 4096, "buffer_capacity": 4096}}  # stores, does not train: CI has 2 cores
    confirmed: set[int] = set()
    done = []
    started = time.monotonic()
    learner, _ = _start_learner(settings)
    actor, reports = _start_actor(address, tmp_path / "outbox", 0, total)

    def read(wait_s: float) -> None:
        """Take the actor's reports for `wait_s` (a bounded wait on the pipe, not a sleep)."""
        deadline = time.monotonic() + wait_s
        while reports.poll(max(0.0, deadline - time.monotonic())):
            try:
                report = reports.recv()
            except (EOFError, OSError):
                return  # the actor is dead
            if isinstance(report, tuple):
                done.append(report)
            else:
                confirmed.add(report)

    def problem() -> str:
        return str(done) if done else "no report from the actor"

    kills = {"learner": 0, "actor": 0, "learner_during_restart": 0}
    while kills["learner"] < learner_kills or kills["actor"] < actor_kills:
        target = min(total, len(confirmed) + int(rng.integers(20, 90)))
        deadline = time.monotonic() + 60
        while len(confirmed) < target and not done and time.monotonic() < deadline:
            read(0.05)
        assert len(confirmed) >= target or done, f"the stream stalled at {len(confirmed)} after {kills}: {problem()}"
        read(float(rng.uniform(0.0, 0.15)))  # a random moment
        if kills["actor"] < actor_kills and (rng.random() < 0.2 or kills["learner"] >= learner_kills) and not done:
            _kill(actor)
            read(0.0)
            actor, reports = _start_actor(address, tmp_path / "outbox", max(confirmed, default=-1) + 1, total)
            kills["actor"] += 1
            continue
        _kill(learner)
        kills["learner"] += 1
        learner, _ = _start_learner(settings)
        if rng.random() < 0.3 and kills["learner"] < learner_kills:  # again, while it recovers and resyncs
            read(float(rng.uniform(0.0, 0.1)))
            _kill(learner)
            kills["learner"] += 1
            kills["learner_during_restart"] += 1
            learner, _ = _start_learner(settings)
    deadline = time.monotonic() + 180
    while not done and time.monotonic() < deadline:
        read(0.1)
    learner.terminate()  # SIGTERM: the serve loop ends
    learner.join(timeout=30)
    actor.join(timeout=30)
    assert done and done[0][1], f"the actor never had everything acknowledged: {done}"
    uids = [int(u) for *_, td in TransitionSpool(tmp_path / "spool").load() for u in td["uid"]]
    result = {**kills, "transitions": total, "stored": len(uids), "lost": len(confirmed - set(uids)),
              "duplicated": len(uids) - len(set(uids)), "wall_s": round(time.monotonic() - started, 1)}  # fmt: skip
    print(result)
    assert result["lost"] == 0 and result["duplicated"] == 0, result
    assert sorted(uids) == list(range(total)), result  # nothing missing, nothing invented
    return result


def test_chaos_short(tmp_path):
    _chaos(tmp_path, seed=0, total=300, learner_kills=4, actor_kills=1)


@pytest.mark.slow
def test_chaos_learner_killed_20_times_actor_4_times(tmp_path):
    result = _chaos(tmp_path, seed=1, total=2000, learner_kills=22, actor_kills=4)
    assert result["learner"] >= 20
