"""CURVE on the actor/learner link: keys from `embodied keys`, only authorized actors, clear errors."""

import inspect
import shutil
import time

import pytest
import torch
from tensordict import TensorDict

from embodied.hil.learner import TransitionSpool
from embodied.hil.transport import ActorLink, LearnerServer


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    from embodied.cli import keys_cmd

    path = tmp_path_factory.mktemp("keys")
    assert keys_cmd([str(path), "--actors", "arm-0", "arm-1"]) == 0
    return path


def _row(uid: int) -> TensorDict:
    return TensorDict({"uid": torch.tensor([uid])}, [1])


def _drive(server, spool, links, until, seconds: float = 10.0) -> None:
    """The serve loop's store-then-acknowledge, until `until()` or the deadline."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        for actor, stream, seq, td in server.poll(5):
            spool.write(actor, stream, seq, td)
            server.ack(actor, stream, seq)
        for link in links:
            link.poll()


def test_keys_command_writes_private_secrets_and_authorizes_the_actors(keys):
    for name in ("learner", "arm-0", "arm-1"):
        assert (keys / f"{name}.key_secret").stat().st_mode & 0o777 == 0o600
        assert (keys / f"{name}.key").is_file()
    assert sorted(p.name for p in (keys / "authorized").iterdir()) == ["arm-0.key", "arm-1.key"]
    before = (keys / "learner.key_secret").read_bytes()
    from embodied.cli import keys_cmd

    assert keys_cmd([str(keys), "--actors", "arm-2"]) == 0  # adds an actor, keeps the learner's key
    assert (keys / "learner.key_secret").read_bytes() == before and (keys / "authorized" / "arm-2.key").exists()


def test_an_authorized_actor_streams_and_an_unknown_key_is_refused(keys, tmp_path):
    spool = TransitionSpool(tmp_path / "spool")
    server = LearnerServer("tcp://127.0.0.1:0", keys=keys, validate=spool.check)
    stranger = tmp_path / "stranger"
    from embodied.cli import keys_cmd

    assert keys_cmd([str(stranger), "--actors", "arm-0"]) == 0  # a keypair the learner never authorized ...
    shutil.copy(keys / "learner.key", stranger / "learner.key")  # ... that knows the learner's public key
    good = ActorLink(server.address, "arm-0", keys=keys, resend_s=0.05)
    bad = ActorLink(server.address, "arm-0", keys=stranger, resend_s=0.05)  # and even claims arm-0's identity
    for i in range(3):
        good.send(_row(i))
        bad.send(_row(100 + i))
    _drive(server, spool, [good, bad], lambda: not good.unacked and bad.handshake_error)
    assert not good.unacked and bad.unacked and not bad.learner_alive
    assert "CURVE authentication failed" in bad.problem
    assert not bad.flush(0.2) and "authentication" in bad.problem
    good.close()
    bad.close()
    server.close()
    assert [int(td["uid"][0]) for *_, td in TransitionSpool(tmp_path / "spool").load()] == [0, 1, 2]


def test_an_authorized_actor_cannot_speak_as_another(keys, tmp_path):
    spool = TransitionSpool(tmp_path / "spool")
    server = LearnerServer("tcp://127.0.0.1:0", keys=keys, validate=spool.check)
    thief = tmp_path / "thief"
    thief.mkdir()
    shutil.copy(keys / "learner.key", thief / "learner.key")
    shutil.copy(keys / "arm-1.key_secret", thief / "arm-0.key_secret")  # arm-1's own, valid key, named arm-0
    link = ActorLink(server.address, "arm-0", keys=thief, resend_s=0.05)
    link.send(_row(7))
    deadline = time.monotonic() + 10
    while server.rejected == 0 and time.monotonic() < deadline:
        assert server.poll(5) == []  # the handshake passes (arm-1 is authorized), every packet is dropped
        link.poll()
    assert server.rejected >= 1 and link.unacked
    link.close()
    server.close()


def test_a_peer_claiming_an_actors_name_does_not_take_over_its_replies(keys, tmp_path):
    """arm-1 (authorized) connects with arm-0's ZeroMQ routing id, as a client may choose one. With routing ids as
    actor names and ROUTER_HANDOVER, the learner's acknowledgements for arm-0 went to that connection and arm-0
    stalled; now the name is in the authenticated header and replies go to arm-0's own connection."""
    import zmq

    from embodied.hil.transport import load_public, load_secret

    spool = TransitionSpool(tmp_path / "spool")
    server = LearnerServer("tcp://127.0.0.1:0", keys=keys, validate=spool.check)
    arm0 = ActorLink(server.address, "arm-0", keys=keys, resend_s=0.05)
    arm0.send(_row(0))
    _drive(server, spool, [arm0], lambda: not arm0.unacked)
    thief = zmq.Context.instance().socket(zmq.DEALER)
    thief.setsockopt(zmq.LINGER, 0)
    thief.setsockopt(zmq.IDENTITY, b"arm-0")
    thief.curve_publickey, thief.curve_secretkey = load_secret(keys / "arm-1.key_secret")
    thief.curve_serverkey = load_public(keys / "learner.key")
    thief.connect(server.address)
    thief.send_multipart([b"O", b'{"actor": "arm-1", "items": []}'])  # a valid hello as itself: connected
    deadline = time.monotonic() + 10
    while "arm-1" not in server.routes and time.monotonic() < deadline:
        server.poll(5)
    for i in range(1, 4):
        arm0.send(_row(i))
    _drive(server, spool, [arm0], lambda: not arm0.unacked)
    assert not arm0.unacked  # arm-0's acknowledgements still reach arm-0
    thief.close(0)
    arm0.close()
    server.close()
    assert [int(td["uid"][0]) for *_, td in TransitionSpool(tmp_path / "spool").load()] == [0, 1, 2, 3]


def test_missing_or_readable_keys_and_plaintext_give_clear_errors(keys, tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nokeys" / "arm-0.key_secret")):
        ActorLink("tcp://127.0.0.1:1", "arm-0", keys=tmp_path / "nokeys")
    with pytest.raises(FileNotFoundError, match="authorized"):
        LearnerServer("tcp://127.0.0.1:0", keys=tmp_path / "nokeys")
    loose = tmp_path / "loose"
    shutil.copytree(keys, loose)
    (loose / "arm-0.key_secret").chmod(0o644)
    with pytest.raises(ValueError, match=f"chmod 600 {loose / 'arm-0.key_secret'}"):
        ActorLink("tcp://127.0.0.1:1", "arm-0", keys=loose)
    with pytest.raises(ValueError, match="--keys"):
        LearnerServer("tcp://127.0.0.1:0")  # neither keys nor an explicit insecure
    with pytest.raises(ValueError, match="loopback"):
        LearnerServer("tcp://*:0", insecure=True)
    with pytest.raises(ValueError, match="loopback"):
        ActorLink("tcp://10.1.2.3:5555", insecure=True)
    assert inspect.signature(LearnerServer).parameters["address"].default.startswith("tcp://127.0.0.1:")


def test_correct_with_a_wrong_key_says_so(ckpt, keys, tmp_path, capsys):
    """`embodied correct --keys` with a key the learner does not know: the session runs (episodes are stored
    locally) and ends with a warning that names the authentication failure."""
    from embodied.cli import correct_cmd, keys_cmd

    server = LearnerServer("tcp://127.0.0.1:0", keys=keys)
    stranger = tmp_path / "stranger"
    assert keys_cmd([str(stranger)]) == 0
    shutil.copy(keys / "learner.key", stranger / "learner.key")
    try:
        code = correct_cmd([str(ckpt), "robot=sim", "teleop=scripted", "--steps", "30", "--no-status",
                            "--store", str(tmp_path / "s"), "--learner", server.address, "--keys", str(stranger)])  # fmt: skip
    finally:
        server.close()
    assert code == 0
    assert "CURVE authentication failed" in capsys.readouterr().err
    assert list((tmp_path / "s" / "outbox" / "actor-0").glob("*.msg"))  # kept for the next session
