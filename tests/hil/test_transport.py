"""Actor/learner over ZeroMQ: wire format, and a learner killed and restarted loses no transition."""

import json
import multiprocessing
import os
import signal
import socket
import time
import pytest
import torch
from tensordict import TensorDict

from embodied import keys, registry
from embodied.hil.intervention import InterventionActor
from embodied.hil.learner import TransitionSpool
from embodied.hil.transport import ActorLink, LearnerServer, ProtocolError, decode, encode
from real_robot.teleop.scripted import ScriptedOperator, ScriptedOperatorConfig

def test_wire_format_round_trip_and_bad_packets():
    tensors = {"obs/state": torch.randn(3, 5), "is_intervention": torch.tensor([True, False, True]),
               "goal": torch.arange(3)}  # fmt: skip
    kind, header, back = decode(encode(b"T", {"seq": 7}, tensors))
    assert kind == b"T" and header["seq"] == 7
    assert all(torch.equal(back[k], v) for k, v in tensors.items())
    frames = encode(b"T", {"seq": 1}, {"x": torch.zeros(4)})
    with pytest.raises(ProtocolError, match="needs 16 bytes"):
        decode([frames[0], frames[1], b"\0" * 3])
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode([b"T", b"{", b""])
    with pytest.raises(ProtocolError, match="dtype"):
        decode([b"T", json.dumps({"items": [["x", "object", [1]]]}).encode(), b"\0" * 8])


def test_go_back_n_in_process():
    server = LearnerServer("tcp://127.0.0.1:0")
    link = ActorLink(server.address, identity="a", resend_s=0.05)
    rows = [TensorDict({"x": torch.full((2,), float(i))}, [2]) for i in range(5)]
    got = []
    for r in rows:
        link.send(r)
    deadline = time.monotonic() + 5
    while link.unacked and time.monotonic() < deadline:
        for actor, seq, td in server.poll(5):
            got.append((seq, float(td["x"][0])))
            server.ack(actor, seq)
        link.poll()
    assert got == [(i, float(i)) for i in range(5)] and not link.unacked and link.learner_alive
    link.close()
    server.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _learner_main(settings: dict, conn) -> None:
    from embodied.hil.learner import serve

    serve(settings, ready=conn.send)


def _start_learner(settings: dict) -> tuple[multiprocessing.Process, dict]:
    """The learner in its own process (forked: it starts in well under a second instead of the
    seconds a fresh interpreter spends importing torch on a loaded machine)."""
    parent, child = multiprocessing.get_context("fork").Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_learner_main, args=(settings, child), daemon=True)
    proc.start()
    assert parent.poll(60), "learner did not start"
    return proc, json.loads(parent.recv())


def test_learner_killed_and_restarted_loses_no_transition(tmp_path):
    run_config = {"env": {"name": "arm_reach"}, "threads": 1,
                  "policy": {"name": "sac_mlp", "actor_hidden": [32], "critic_hidden": [32]},
                  "algo": {"name": "sac", "batch_size": 16}}  # fmt: skip
    address = f"tcp://127.0.0.1:{_free_port()}"
    settings = {"run_config": run_config, "address": address, "spool": str(tmp_path / "spool"),
                "learner": {"min_buffer": 16, "weights_every": 5}}
    learner, hello = _start_learner(settings)
    env = registry.build("env", "arm_reach", {}, num_envs=2)
    policy = registry.build("policy", "sac_mlp", {"actor_hidden": (32,), "critic_hidden": (32,)},
                            observation_spec=env.observation_spec, action_spec=env.action_spec)  # fmt: skip
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    fires = lambda obs: torch.tensor([True, False])  # noqa: E731 - env 0 is corrected by the operator
    op = ScriptedOperator(ScriptedOperatorConfig(action_dim=4, min_steps=5, max_per_episode=3),
                          expert=lambda obs: torch.zeros(2, 4), rule=fires)  # fmt: skip
    actor = InterventionActor(env, policy, op)
    actor.reset(seed=0)
    link = ActorLink(address, identity="arm-0", resend_s=0.1, timeout_s=0.5)
    sent, weights_seen, alive_while_down = [], 0, []
    restarted = None
    try:
        for step in range(60):
            row, _ = actor.step()
            link.send(row)
            sent.append(row)
            weights = link.poll()
            if weights is not None:
                policy.load_state_dict(weights)  # the actor follows the learner's weights
                weights_seen += 1
            if step == 20:
                assert link.flush(20.0), "learner never acknowledged the first steps"
            if step == 25:
                os.kill(learner.pid, signal.SIGKILL)  # no clean shutdown: whatever was in flight is lost
                learner.join()
            if 25 < step < 40:
                time.sleep(0.05)  # the robot keeps running while the learner is away
                alive_while_down.append(link.learner_alive)
            if step == 40:
                learner, restarted = _start_learner(settings)
        assert link.flush(20.0), f"{len(link.unacked)} messages never acknowledged"
        deadline = time.monotonic() + 10
        while weights_seen == 0 and time.monotonic() < deadline:  # the restarted learner trains and broadcasts
            weights = link.poll()
            if weights is not None:
                policy.load_state_dict(weights)
                weights_seen += 1
            time.sleep(0.01)
    finally:
        learner.terminate()  # SIGTERM: the learner's loop ends
        learner.join(timeout=10)
        link.close()
    assert weights_seen >= 1 and any(not torch.equal(before[k], v) for k, v in policy.state_dict().items())
    assert not alive_while_down[-1]  # the actor noticed the learner was gone
    assert restarted["received"] >= 2 * 21  # the new learner reloaded what the old one had stored
    stored = list(TransitionSpool(tmp_path / "spool").load())
    assert [seq for _, seq, _ in stored] == list(range(60))  # every message exactly once, in order
    for (_, _, got), want in zip(stored, sent):
        assert torch.equal(got[keys.OBS][keys.STATE], want[keys.OBS][keys.STATE])
        assert torch.equal(got[keys.IS_INTERVENTION], want[keys.IS_INTERVENTION])
        assert torch.equal(got[keys.ACTION], want[keys.ACTION])
