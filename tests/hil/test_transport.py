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
    kind, header, back = decode(encode(b"T", {"seq": 7, "stream": "s", "actor": "a"}, tensors))
    assert kind == b"T" and header["seq"] == 7
    assert all(torch.equal(back[k], v) for k, v in tensors.items())
    frames = encode(b"T", {"seq": 1, "stream": "s", "actor": "a"}, {"x": torch.zeros(4)})
    with pytest.raises(ProtocolError, match="needs 16 bytes"):
        decode([frames[0], frames[1], b"\0" * 3])
    with pytest.raises(ProtocolError, match="not valid JSON"):
        decode([b"T", b"{", b""])
    with pytest.raises(ProtocolError, match="dtype"):
        decode([b"T", json.dumps({"seq": 0, "stream": "s", "actor": "a", "items": [["x", "object", [1]]]}).encode(),
                b"\0" * 8])


def test_go_back_n_in_process():
    server = LearnerServer("tcp://127.0.0.1:0", insecure=True)
    link = ActorLink(server.address, identity="a", insecure=True, resend_s=0.05)
    rows = [TensorDict({"x": torch.full((2,), float(i))}, [2]) for i in range(5)]
    got = []
    for r in rows:
        link.send(r)
    deadline = time.monotonic() + 5
    while link.unacked and time.monotonic() < deadline:
        for actor, stream, seq, td in server.poll(5):
            got.append((seq, float(td["x"][0])))
            server.ack(actor, stream, seq)
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
    settings = {"run_config": run_config, "address": address, "spool": str(tmp_path / "spool"), "insecure": True,
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
    link = ActorLink(address, identity="arm-0", insecure=True, resend_s=0.1, timeout_s=0.5)
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
    assert [seq for _, _, seq, _ in stored] == list(range(60))  # every message exactly once, in order
    for (_, _, _, got), want in zip(stored, sent):
        assert torch.equal(got[keys.OBS][keys.STATE], want[keys.OBS][keys.STATE])
        assert torch.equal(got[keys.IS_INTERVENTION], want[keys.IS_INTERVENTION])
        assert torch.equal(got[keys.ACTION], want[keys.ACTION])


def _packet(seq: int, value: float, stream: str = "s0") -> list[bytes]:
    return encode(b"T", {"seq": seq, "stream": stream, "actor": "a"}, {"x": torch.full((2,), float(value))})


def test_a_duplicate_in_the_same_batch_is_acknowledged_only_up_to_what_is_stored(tmp_path):
    """Issue 15, defect 1: 0 and 1 accepted in one poll batch, then a resend of 0 arrives before the caller stored
    them. The old server answered ack(expected - 1) = 1, so a crash before the spool write lost both for good."""
    spool = TransitionSpool(tmp_path / "spool")
    server = LearnerServer("tcp://127.0.0.1:0", insecure=True, validate=spool.check)
    replies = []
    server._send = lambda identity, frames: replies.append(decode(frames)[1])  # what goes back to the actor
    batch = [server.handle(b"a", None, _packet(seq, seq)) for seq in (0, 1)]
    assert [got[2] for got in batch] == [0, 1]
    assert server.handle(b"a", None, _packet(0, 0.0)) is None  # the duplicate, same batch, nothing stored yet
    assert [r["ack"] for r in replies] == [-1]  # nothing is durable: no acknowledgement covers 0 or 1
    actor, stream, seq, td = batch[0]
    spool.write(actor, stream, seq, td)  # the caller stores 0 ... and the process dies before storing 1
    server.ack(actor, stream, seq)
    server.handle(b"a", None, _packet(1, 1.0))  # a late resend of 1 to the dying server
    assert [r["ack"] for r in replies] == [-1, 0, 0]  # never 1
    server.close()
    restarted = TransitionSpool(tmp_path / "spool")
    assert [seq for *_, seq, _ in restarted.load()] == [0] and restarted.recovered == {("a", "s0"): 1}
    server = LearnerServer("tcp://127.0.0.1:0", insecure=True, next_seq=restarted.recovered, validate=restarted.check)
    assert server.handle(b"a", None, _packet(0, 0.0)) is None  # stored before: never twice
    assert server.handle(b"a", None, _packet(1, 1.0))[2] == 1  # the actor still has 1 and resends it
    server.close()


def test_the_spool_survives_a_leftover_tmp_a_gap_and_a_damaged_file(tmp_path, capsys):
    spool = TransitionSpool(tmp_path)
    for seq in range(6):
        spool.write("a", "s0", seq, TensorDict({"x": torch.full((2,), float(seq))}, [2]))
    spool.write("b", "s1", 0, TensorDict({"x": torch.zeros(2)}, [2]))
    folder = tmp_path / "a" / "s0"
    (folder / "000000000006.tmp").write_bytes(b"half a file")  # the learner died writing 6
    (folder / "000000000002.safetensors").write_bytes(b"\xff" * 40)  # a damaged file
    (tmp_path / "b" / "s1" / "000000000003.safetensors").write_bytes(b"after a gap")
    again = TransitionSpool(tmp_path)
    loaded = [(actor, seq, float(td["x"][0])) for actor, _, seq, td in again.load()]
    assert loaded == [("a", 0, 0.0), ("a", 1, 1.0), ("b", 0, 0.0)]
    assert again.recovered == {("a", "s0"): 2, ("b", "s1"): 1}  # the actor resends from there
    assert not list(tmp_path.rglob("*.tmp"))
    err = capsys.readouterr().err
    assert f"{folder / '000000000002.safetensors'} unreadable" in err and "expected message 1 here" in err
    quarantined = sorted(p.name for p in (tmp_path / ".quarantine" / "a" / "s0").iterdir())
    assert quarantined == [f"{i:012d}.safetensors" for i in range(2, 6)]
    assert [seq for *_, seq, _ in TransitionSpool(tmp_path).load()] == [0, 1, 0]  # a second start: the same


def test_a_message_off_the_schema_is_refused_not_stored_and_the_actor_says_why(tmp_path):
    spool = TransitionSpool(tmp_path, required={"x": ("float32", [])})
    server = LearnerServer("tcp://127.0.0.1:0", insecure=True, validate=spool.check)
    link = ActorLink(server.address, identity="a", insecure=True, resend_s=0.05)
    link.send(TensorDict({"y": torch.zeros(2)}, [2]))  # lacks "x"
    deadline = time.monotonic() + 10
    while link.refused is None and time.monotonic() < deadline:
        assert server.poll(5) == []
        link.poll()
    assert "lack 'x'" in link.refused and server.rejected >= 1
    with pytest.raises(RuntimeError, match="refused message 0"):
        link.send(TensorDict({"x": torch.zeros(2)}, [2]))  # the stream cannot skip a message: stop loudly
    assert not link.flush(0.1) and "refused" in link.problem
    link.close()
    server.close()


def _pump(server: LearnerServer, spool: TransitionSpool, link: ActorLink, until, timeout_s: float = 10.0) -> None:
    """The serve loop's store-then-acknowledge, driven until `until()` or the deadline."""
    deadline = time.monotonic() + timeout_s
    while not until() and time.monotonic() < deadline:
        for actor, stream, seq, td in server.poll(5):
            spool.write(actor, stream, seq, td)
            server.ack(actor, stream, seq)
        link.poll()


def test_an_actor_restarted_on_its_outbox_resends_what_was_not_acknowledged(tmp_path):
    spool = TransitionSpool(tmp_path / "spool")
    server = LearnerServer("tcp://127.0.0.1:0", insecure=True, validate=spool.check)
    link = ActorLink(server.address, "arm-0", insecure=True, backlog=tmp_path / "outbox", resend_s=0.05)
    for i in range(3):
        link.send(TensorDict({"uid": torch.tensor([i])}, [1]))
    _pump(server, spool, link, lambda: not link.unacked)
    assert not link.unacked
    for i in range(3, 8):  # queued while the learner is not reading, then the actor dies (no flush, no goodbye)
        link.send(TensorDict({"uid": torch.tensor([i])}, [1]))
    link.close()
    link = ActorLink(server.address, "arm-0", insecure=True, backlog=tmp_path / "outbox", resend_s=0.05)
    assert sorted(link.unacked) == list(range(3, 8)) and link.next_seq == 8  # the same stream, from disk
    link.send(TensorDict({"uid": torch.tensor([8])}, [1]))
    _pump(server, spool, link, lambda: not link.unacked)
    link.close()
    link = ActorLink(server.address, "arm-0", insecure=True, backlog=tmp_path / "outbox", resend_s=0.05)
    assert link.next_seq == 0 and not link.unacked  # all acknowledged: a new stream
    link.send(TensorDict({"uid": torch.tensor([9])}, [1]))
    _pump(server, spool, link, lambda: not link.unacked)
    link.close()
    server.close()
    uids = [int(td["uid"][0]) for *_, td in TransitionSpool(tmp_path / "spool").load()]
    assert sorted(uids) == list(range(10))  # each once


def test_the_actor_reports_a_learner_that_lost_what_it_acknowledged(tmp_path):
    server = LearnerServer("tcp://127.0.0.1:0", insecure=True)
    link = ActorLink(server.address, "a", insecure=True, resend_s=0.05)
    spool = TransitionSpool(tmp_path / "spool")
    link.send(TensorDict({"x": torch.zeros(1)}, [1]))
    _pump(server, spool, link, lambda: not link.unacked)
    address = server.address
    server.close()
    server = LearnerServer(address, insecure=True)  # restarted with an empty spool: expects 0 again
    link.send(TensorDict({"x": torch.zeros(1)}, [1]))
    _pump(server, TransitionSpool(tmp_path / "other"), link, lambda: link.lost is not None)
    assert link.learner_restarts == 1 and "spool was lost" in link.problem
    link.close()
    server.close()
