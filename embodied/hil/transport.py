"""Actor <-> learner over ZeroMQ: transitions stream to the learner, weights stream back.

    link = ActorLink("tcp://learner-host:5555", identity="arm-0")     # actor (robot side)
    link.send(transitions)          # TensorDict [B]; kept until the learner acknowledges it
    weights = link.poll()           # newest weights since the last poll, or None
    link.learner_alive              # heard from the learner within `timeout_s`

    server = LearnerServer("tcp://*:5555", next_seq={"arm-0": 0})     # learner
    for actor, seq, transitions in server.poll(timeout_ms=10): ...    # in order, each once
    server.ack(actor, seq); server.send_weights(state_dict, version)

Delivery is go-back-N over a DEALER/ROUTER pair: every message carries a sequence number; the
learner accepts only the next one it expects (a duplicate is re-acknowledged, a message after a
gap dropped), and acknowledges cumulatively once the caller has stored what it accepted. The
actor keeps every unacknowledged message and resends them, in order, every `resend_s` without an
acknowledgement. So when the learner process dies and a new one starts on the same address
(recovering `next_seq` from what it stored), the actor's backlog arrives and nothing is lost or
duplicated. ZeroMQ reconnects the socket by itself. The learner also sends a heartbeat every
`heartbeat_s`; an actor that hears nothing for `timeout_s` considers the learner lost.

Wire format (no pickle: a packet from the network is data, never code): frames
[kind, header JSON, *raw buffers], the header listing each tensor's key, dtype and shape; a
malformed packet raises `ProtocolError` naming what is wrong.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict

import numpy as np
import torch
import zmq
from tensordict import TensorDict

TRANSITIONS, ACK, WEIGHTS, HEARTBEAT, HELLO = b"T", b"A", b"W", b"H", b"O"
_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"}


class ProtocolError(ValueError):
    pass


def encode(kind: bytes, header: dict, tensors: dict[str, torch.Tensor]) -> list[bytes]:
    arrays = {k: v.detach().cpu().contiguous().numpy() for k, v in tensors.items()}
    header = {**header, "items": [[k, str(a.dtype), list(a.shape)] for k, a in arrays.items()]}
    return [kind, json.dumps(header).encode(), *(a.tobytes() for a in arrays.values())]


def decode(frames: list[bytes]) -> tuple[bytes, dict, dict[str, torch.Tensor]]:
    if len(frames) < 2:
        raise ProtocolError(f"packet of {len(frames)} frames; need at least kind and header")
    kind = bytes(frames[0])
    try:
        header = json.loads(bytes(frames[1]))
        items = header["items"]
    except (ValueError, KeyError, TypeError) as err:
        raise ProtocolError(f"packet header is not valid JSON with 'items': {err}") from None
    if len(items) != len(frames) - 2:
        raise ProtocolError(f"header lists {len(items)} tensors, the packet carries {len(frames) - 2} buffers")
    tensors = {}
    for (key, dtype, shape), buf in zip(items, frames[2:]):
        if dtype not in _DTYPES:
            raise ProtocolError(f"tensor {key!r} has dtype {dtype!r}; valid: {sorted(_DTYPES)}")
        expected = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if len(buf) != expected:
            raise ProtocolError(f"tensor {key!r} {dtype} {shape} needs {expected} bytes, got {len(buf)}")
        tensors[key] = torch.from_numpy(np.frombuffer(bytes(buf), dtype=dtype).reshape(shape).copy())
    return kind, header, tensors


def flat(td: TensorDict) -> dict[str, torch.Tensor]:
    return dict(td.flatten_keys("/").items())


def unflat(tensors: dict[str, torch.Tensor]) -> TensorDict:
    n = next(iter(tensors.values())).shape[0]
    return TensorDict(tensors, batch_size=[n]).unflatten_keys("/")


class ActorLink:
    def __init__(self, address: str, identity: str = "actor-0", resend_s: float = 0.5, timeout_s: float = 2.0,
                 max_unacked: int = 1_000_000):  # fmt: skip
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, identity.encode())
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 10_000)
        self.socket.connect(address)
        self.resend_s, self.timeout_s, self.max_unacked = resend_s, timeout_s, max_unacked
        self.next_seq = 0
        self.unacked: OrderedDict[int, list[bytes]] = OrderedDict()
        self.acked = -1  # highest sequence number the learner has stored
        self.last_heard = -float("inf")
        self._last_push = -float("inf")  # last time the backlog was (re)sent or a hello went out
        self._progress = -float("inf")  # last time an acknowledgement moved `acked` forward
        self.weights_version = -1
        self.learner_stats: dict = {}  # the learner's counters, from its heartbeats
        self._weights: dict[str, torch.Tensor] | None = None  # newest weights not handed out yet

    @property
    def learner_alive(self) -> bool:
        return time.monotonic() - self.last_heard < self.timeout_s

    def send(self, transitions: TensorDict) -> int:
        """Queue `transitions` [B] for the learner; returns its sequence number."""
        if len(self.unacked) >= self.max_unacked:
            raise RuntimeError(f"{len(self.unacked)} messages unacknowledged: the learner has been away too long")
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        self.unacked[seq] = encode(TRANSITIONS, {"seq": seq}, flat(transitions))
        if self.learner_alive:
            self._push(self.unacked[seq])
        return seq

    def _push(self, frames: list[bytes]) -> None:
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass  # the queue is full while the learner is away; the message stays in `unacked`

    def poll(self) -> dict[str, torch.Tensor] | None:
        """Handle acknowledgements and heartbeats, resend a stale backlog; the newest weights received
        since the last call (also those that came in during `flush`), or None."""
        self._receive()
        weights, self._weights = self._weights, None
        return weights

    def _receive(self) -> None:
        while self.socket.poll(0):
            kind, header, tensors = decode(self.socket.recv_multipart())
            self.last_heard = time.monotonic()
            if kind == ACK:
                if int(header["ack"]) > self.acked:
                    self.acked, self._progress = int(header["ack"]), time.monotonic()
                while self.unacked and next(iter(self.unacked)) <= self.acked:
                    self.unacked.popitem(last=False)
            elif kind == WEIGHTS:  # a restarted learner counts versions from 0 again: take any
                self.weights_version, self._weights = int(header["version"]), tensors
            elif kind == HEARTBEAT:
                self.learner_stats = header.get("stats", {})
        now = time.monotonic()
        if now - max(self._last_push, self._progress) > self.resend_s:
            self._last_push = now
            if self.unacked and self.learner_alive:  # go-back-N: everything not acknowledged, oldest first
                for frames in self.unacked.values():
                    self._push(frames)
            elif self.unacked:  # learner away: probe with the oldest; the backlog follows its acknowledgement
                self._push(next(iter(self.unacked.values())))
            else:
                self._push(encode(HELLO, {}, {}))  # lets a restarted learner know where to send heartbeats

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until the learner acknowledged everything sent; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while self.unacked and time.monotonic() < deadline:
            self._receive()
            time.sleep(0.005)
        return not self.unacked

    def close(self) -> None:
        self.socket.close(0)


class LearnerServer:
    def __init__(self, address: str, next_seq: dict[str, int] | None = None, heartbeat_s: float = 0.2):
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a reconnecting actor takes over its identity
        self.socket.bind(address)
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)  # the real port of tcp://*:0
        self.next_seq: dict[str, int] = dict(next_seq or {})
        self.heartbeat_s, self._last_beat = heartbeat_s, 0.0
        self.rejected = 0  # malformed packets dropped
        self.stats: dict = {}  # counters sent with each heartbeat (updates, buffer sizes)

    def poll(self, timeout_ms: int = 0) -> list[tuple[str, int, TensorDict]]:
        """Accepted transitions, in order, each once: [(actor, seq, TensorDict [B])]."""
        accepted = []
        if self.socket.poll(timeout_ms):
            while self.socket.poll(0):
                identity, *frames = self.socket.recv_multipart()
                actor = identity.decode(errors="replace")
                try:
                    kind, header, tensors = decode(frames)
                except ProtocolError:
                    self.rejected += 1
                    continue
                expected = self.next_seq.setdefault(actor, 0)
                if kind != TRANSITIONS:
                    continue
                seq = int(header["seq"])
                if seq == expected and tensors:
                    self.next_seq[actor] = seq + 1
                    accepted.append((actor, seq, unflat(tensors)))
                elif seq < expected:
                    self.ack(actor, expected - 1)  # a resend of something stored: acknowledge again
        now = time.monotonic()
        if now - self._last_beat > self.heartbeat_s:
            self._last_beat = now
            for actor in self.next_seq:
                self._send(actor, encode(HEARTBEAT, {"stats": self.stats}, {}))
        return accepted

    def ack(self, actor: str, seq: int) -> None:
        self._send(actor, encode(ACK, {"ack": seq}, {}))

    def send_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        frames = encode(WEIGHTS, {"version": version}, state_dict)
        for actor in self.next_seq:
            self._send(actor, frames)

    def _send(self, actor: str, frames: list[bytes]) -> None:
        try:
            self.socket.send_multipart([actor.encode(), *frames], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # that actor is not connected right now

    def close(self) -> None:
        self.socket.close(0)
