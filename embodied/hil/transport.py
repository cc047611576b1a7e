"""Actor <-> learner over ZeroMQ: transitions stream to the learner, weights stream back.

    embodied keys keys/                                            # learner + actor-0 keypairs (CURVE)
    server = LearnerServer("tcp://127.0.0.1:5555", keys="keys/", next_seq=spool.recovered, validate=spool.check)
    for actor, stream, seq, transitions in server.poll(timeout_ms=10):   # in order, each once
        spool.write(actor, stream, seq, transitions); server.ack(actor, stream, seq)   # ack = durably stored
    server.send_weights(state_dict, version)

    link = ActorLink("tcp://learner-host:5555", identity="actor-0", keys="keys/", backlog="corrections/outbox")
    link.send(transitions)          # TensorDict [B]; kept (on disk with `backlog`) until the learner has stored it
    weights = link.poll()           # newest weights since the last poll, or None
    link.learner_alive, link.problem   # heard from the learner within `timeout_s`; why nothing moves, if so

Delivery is go-back-N over a DEALER/ROUTER pair. An actor's messages form a *stream* (a random id
and sequence numbers from 0); the learner accepts only the next number it expects per (actor,
stream), and acknowledges cumulatively only what its caller has durably stored (`ack` after the
spool write): a duplicate or a message after a gap is answered with that stored watermark, never
with what is merely accepted, so an acknowledgement can never cover data a crash may still lose.
The actor keeps every unacknowledged message, sends at most `window` ahead of the watermark, goes
back to the oldest unacknowledged one when `resend_s` pass without progress, and at once when the
learner's run id changes (a restarted learner). A restarted learner recovers `next_seq` from its
spool, so the backlog arrives and nothing is lost or stored twice. An actor restarted with the
same `backlog` folder continues its stream from the messages on disk; without one it starts a new
stream and loses only what it had not had acknowledged (in memory).

Security: CURVE encryption and authentication by default. The learner accepts only actors whose
public key is in `<keys>/authorized/`, and only under the identity that key is named for
(`authorized/arm-0.key` may speak as `arm-0`, nobody else may). The actor's name travels in each packet's
header, not as the ZeroMQ routing id: the learner routes its replies to the connection that last sent a packet
that passed that check, so another peer cannot take over an actor's replies (with a client-chosen routing id
and ROUTER_HANDOVER it could, and stall the actor). Plaintext only with
`insecure=True`, and only on a loopback address. Keys are made by `generate_keys` (`embodied keys`):
the learner needs `learner.key_secret` and `authorized/`, an actor `<identity>.key_secret` and
`learner.key`; secret files are 0600 and refused when group or others can read them.

A message the learner's `validate` rejects (it does not fit the learner's schema) is answered with
REFUSED and never stored or acknowledged; since go-back-N cannot skip it, the actor's next `send`
raises with the learner's reason. An authenticated peer's packet that fails any check is dropped.

Wire format (no pickle: a packet from the network is data, never code): frames
[kind, header JSON, *raw buffers], the header listing each tensor's key, dtype and shape. `decode`
checks everything (types, sizes, key names); any malformed packet raises `ProtocolError`, which the
learner counts in `rejected` and drops.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import time
from pathlib import Path

import numpy as np
import torch
import zmq
import zmq.auth
import zmq.utils.monitor
from tensordict import TensorDict

from embodied.hil.durable import write_durably

TRANSITIONS, ACK, WEIGHTS, HEARTBEAT, HELLO, REFUSED = b"T", b"A", b"W", b"H", b"O", b"R"
_DTYPES = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool"}
# a key is "/"-separated names; no segment may start with "." (no "..", no hidden names), none is empty
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_KEY = re.compile(rf"{_NAME.pattern}(/{_NAME.pattern}){{0,7}}")
MAX_MESSAGE_BYTES = 256 << 20  # the learner drops larger messages unread (a 64-camera 512x512 batch fits)
_MAX_SEQ = 1 << 62


class ProtocolError(ValueError):
    pass


def _name(v) -> bool:
    return isinstance(v, str) and _NAME.fullmatch(v) is not None


def _int(v, lo: int = 0, hi: int = _MAX_SEQ) -> bool:
    return type(v) is int and lo <= v < hi  # `type is`: JSON true is a bool, and bool is an int in Python


# header fields each kind must carry, with their checks
_FIELDS = {
    TRANSITIONS: {"seq": _int, "stream": _name, "actor": _name},
    ACK: {"ack": lambda v: _int(v, -1), "stream": lambda v: isinstance(v, str), "run": lambda v: isinstance(v, str)},
    WEIGHTS: {"version": lambda v: _int(v, -1)},
    HEARTBEAT: {"run": lambda v: isinstance(v, str), "stats": lambda v: isinstance(v, dict)},
    HELLO: {"actor": _name},
    REFUSED: {"seq": _int, "stream": lambda v: isinstance(v, str), "reason": lambda v: isinstance(v, str)},
}


def encode(kind: bytes, header: dict, tensors: dict[str, torch.Tensor]) -> list[bytes]:
    arrays = {k: v.detach().cpu().contiguous().numpy() for k, v in tensors.items()}
    header = {**header, "items": [[k, str(a.dtype), list(a.shape)] for k, a in arrays.items()]}
    return [kind, json.dumps(header).encode(), *(a.tobytes() for a in arrays.values())]


def decode(frames: list[bytes]) -> tuple[bytes, dict, dict[str, torch.Tensor]]:
    """(kind, header, tensors) of a packet; ProtocolError naming the first thing wrong with it."""
    if len(frames) < 2:
        raise ProtocolError(f"packet of {len(frames)} frames; need at least kind and header")
    kind = bytes(frames[0])
    if kind not in _FIELDS:
        raise ProtocolError(f"unknown packet kind {kind[:8]!r}")
    try:
        header = json.loads(bytes(frames[1]))
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"packet header is not valid JSON: {str(err)[:80]}") from None
    if not isinstance(header, dict) or not isinstance(header.get("items"), list):
        raise ProtocolError("packet header is not a JSON object with an 'items' list")
    for field, ok in _FIELDS[kind].items():
        if not ok(header.get(field)):
            raise ProtocolError(f"{kind.decode()} packet: header field {field}={str(header.get(field))[:40]} is invalid")
    items = header["items"]
    if len(items) != len(frames) - 2:
        raise ProtocolError(f"header lists {len(items)} tensors, the packet carries {len(frames) - 2} buffers")
    tensors = {}
    for item, buf in zip(items, frames[2:]):
        key, dtype, shape = _check_item(item)
        if key in tensors:
            raise ProtocolError(f"tensor {key!r} listed twice")
        expected = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize  # Python ints: no overflow
        if len(buf) != expected:
            raise ProtocolError(f"tensor {key!r} {dtype} {shape} needs {expected} bytes, got {len(buf)}")
        array = np.frombuffer(bytes(buf), dtype=np.uint8 if dtype == "bool" else dtype).reshape(shape)
        tensors[key] = torch.from_numpy(array != 0 if dtype == "bool" else array.copy())  # bool: only 0/1 bytes
    names = set(tensors)
    for key in tensors:  # "a" and "a/b" cannot both be leaves of one TensorDict
        if any(key[:i] in names for i, c in enumerate(key) if c == "/"):
            raise ProtocolError(f"tensor {key!r} lies under another tensor's key")
    if kind == TRANSITIONS:
        lengths = {tuple(t.shape[:1]) for t in tensors.values()}
        if len(lengths) != 1 or lengths in ({()}, {(0,)}):
            raise ProtocolError(f"transitions need tensors with one shared leading length >= 1, got {sorted(lengths)}")
    return kind, header, tensors


def _check_item(item) -> tuple[str, str, list[int]]:
    if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and isinstance(item[1], str)
            and isinstance(item[2], list)):  # fmt: skip
        raise ProtocolError(f"item {str(item)[:60]} is not [key, dtype, shape]")
    key, dtype, shape = item
    if not _KEY.fullmatch(key):
        raise ProtocolError(f"tensor key {key[:60]!r} is not a '/'-separated name")
    if dtype not in _DTYPES:
        raise ProtocolError(f"tensor {key!r} has dtype {dtype[:20]!r}; valid: {sorted(_DTYPES)}")
    if len(shape) > 8 or not all(_int(d, 0, MAX_MESSAGE_BYTES + 1) for d in shape):
        raise ProtocolError(f"tensor {key!r} has shape {str(shape)[:60]}: at most 8 dimensions, each an int >= 0")
    return key, dtype, shape


def flat(td: TensorDict) -> dict[str, torch.Tensor]:
    return dict(td.flatten_keys("/").items())


def unflat(tensors: dict[str, torch.Tensor]) -> TensorDict:
    n = next(iter(tensors.values())).shape[0]
    return TensorDict(tensors, batch_size=[n]).unflatten_keys("/")


# ------------------------------------------------------------------------------------------------ keys


def generate_keys(directory: str | Path, actors: tuple[str, ...] = ("actor-0",)) -> list[Path]:
    """CURVE keypairs for the learner and each actor, the actors' public keys authorized; existing
    keys are kept (regenerating the learner's would lock out every actor). Returns the files written."""
    directory = Path(directory)
    (directory / "authorized").mkdir(parents=True, exist_ok=True)
    written = []
    for name in ("learner", *actors):
        if not _NAME.fullmatch(name):
            raise ValueError(f"actor name {name!r}: use letters, digits, '_', '-', '.'")
        if (directory / f"{name}.key_secret").exists():
            continue
        public, secret = zmq.curve_keypair()
        _write_key(directory / f"{name}.key_secret", public, secret)
        _write_key(directory / f"{name}.key", public)
        written += [directory / f"{name}.key_secret", directory / f"{name}.key"]
        if name != "learner":
            _write_key(directory / "authorized" / f"{name}.key", public)
            written.append(directory / "authorized" / f"{name}.key")
    return written


def _write_key(path: Path, public: bytes, secret: bytes | None = None) -> None:
    """ZeroMQ's certificate format (zmq.auth.load_certificate reads it); a secret file is created
    0600 from the start, so it is never readable by others, not even for a moment."""
    lines = ["#   ZeroMQ CURVE certificate (embodied keys)", "metadata", "curve", f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret is not None else 0o644)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")


def load_secret(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a secret key file; refuses one that group or others may read."""
    if not path.is_file():
        raise FileNotFoundError(f"no key file {path}: create keys with `embodied keys {path.parent}`")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise ValueError(f"secret key {path} is readable by group or others (mode {mode:o}): chmod 600 {path}")
    public, secret = zmq.auth.load_certificate(path)
    if not secret:
        raise ValueError(f"{path} holds no secret key")
    return public, secret


def load_public(path: Path) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"no key file {path}: copy it from the machine that ran `embodied keys`")
    return zmq.auth.load_certificate(path)[0]


def _check_plaintext(address: str, insecure: bool, keys) -> None:
    if keys is not None:
        return
    if not insecure:
        raise ValueError(f"no keys for {address}: pass keys=<dir from `embodied keys`> (--keys), or insecure "
                         "(--insecure, plaintext, loopback addresses only)")  # fmt: skip
    host = address.split("://", 1)[-1].rsplit(":", 1)[0].strip("[]")
    local = address.startswith(("ipc://", "inproc://")) or host == "localhost"
    try:
        local = local or ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not local:
        raise ValueError(f"insecure (plaintext) transport on {address}: only loopback addresses (127.0.0.1, ::1); "
                         "use keys from `embodied keys` for anything else")  # fmt: skip


# ------------------------------------------------------------------------------------------------ actor

_HANDSHAKE_EVENTS = {
    zmq.EVENT_HANDSHAKE_FAILED_AUTH: "the learner refused this actor's key (CURVE authentication failed): is "
                                     "authorized/{identity}.key on the learner this actor's public key?",
    zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "the CURVE handshake with the learner failed: wrong learner.key, or one side "
                                         "runs without keys (--insecure)",
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "the handshake with the learner failed (authentication or a network error)",
}  # fmt: skip


class ActorLink:
    def __init__(self, address: str, identity: str = "actor-0", keys: str | Path | None = None, insecure: bool = False,
                 backlog: str | Path | None = None, resend_s: float = 0.5, timeout_s: float = 2.0, window: int = 256,
                 max_unacked: int = 1_000_000):  # fmt: skip
        if not _NAME.fullmatch(identity):
            raise ValueError(f"actor identity {identity!r}: use letters, digits, '_', '-', '.'")
        _check_plaintext(address, insecure, keys)
        self.address, self.identity = address, identity
        self.context = zmq.Context.instance()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 10_000)
        if keys is not None:
            keys = Path(keys)
            self.socket.curve_publickey, self.socket.curve_secretkey = load_secret(keys / f"{identity}.key_secret")
            self.socket.curve_serverkey = load_public(keys / "learner.key")
        events = sum(_HANDSHAKE_EVENTS) | zmq.EVENT_HANDSHAKE_SUCCEEDED
        self.monitor = self.socket.get_monitor_socket(events)  # the only place a refused key shows on this side
        self.socket.connect(address)
        self.resend_s, self.timeout_s, self.window, self.max_unacked = resend_s, timeout_s, window, max_unacked
        self.outbox = Outbox(Path(backlog) / identity) if backlog is not None else None
        self.stream, self.unacked = self.outbox.load() if self.outbox else (secrets.token_hex(8), {})
        self.next_seq = max(self.unacked, default=-1) + 1
        self.acked = min(self.unacked, default=self.next_seq) - 1  # highest sequence number the learner has stored
        self._sent = self.acked  # highest sequence number pushed since the last go-back
        self.last_heard = -float("inf")
        self._last_push = -float("inf")  # last go-back, probe or hello
        self._progress = -float("inf")  # last time an acknowledgement moved `acked` forward
        self._started = time.monotonic()
        self.learner_run: str | None = None  # the learner process's id: a new one means a restart
        self.learner_restarts = 0
        self.handshake_error: str | None = None
        self._key_refused = False  # the learner's authenticator said no: waiting will not help
        self.refused: str | None = None  # the learner refused a message: the stream cannot go on
        self.lost: str | None = None  # the learner's watermark went backwards: it lost what it had acknowledged
        self.weights_version = -1
        self.learner_stats: dict = {}  # the learner's counters, from its heartbeats
        self._weights: dict[str, torch.Tensor] | None = None  # newest weights not handed out yet

    @property
    def learner_alive(self) -> bool:
        return time.monotonic() - self.last_heard < self.timeout_s

    @property
    def problem(self) -> str | None:
        """Why messages are not being acknowledged, in words; None while the stream moves."""
        if self.refused or self.lost or self.handshake_error:
            return self.refused or self.lost or self.handshake_error
        if not self.learner_alive:
            return f"no learner heard at {self.address} for {self.timeout_s:g} s"
        quiet = time.monotonic() - max(self._progress, self._started)
        if self.unacked and quiet > max(self.timeout_s, 4 * self.resend_s):
            return f"the learner is alive but acknowledged nothing for {quiet:.1f} s"
        return None

    def send(self, transitions: TensorDict) -> int:
        """Queue `transitions` [B] for the learner (on disk first, with a backlog); returns its sequence number."""
        if self.refused:
            raise RuntimeError(self.refused)
        if len(self.unacked) >= self.max_unacked:
            raise RuntimeError(f"{len(self.unacked)} messages unacknowledged: the learner has been away too long")
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        frames = encode(TRANSITIONS, {"seq": seq, "stream": self.stream, "actor": self.identity}, flat(transitions))
        if self.outbox:
            self.outbox.write(seq, frames)
        self.unacked[seq] = frames
        self._pump()
        return seq

    def _push(self, frames: list[bytes]) -> None:
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            pass  # the queue is full while the learner is away; the message stays in `unacked`

    def _pump(self) -> None:
        """Push what the window allows: the messages after `_sent`, up to `window` past the watermark."""
        if not self.learner_alive:
            return
        for seq in range(self._sent + 1, min(self.next_seq, self.acked + 1 + self.window)):
            self._push(self.unacked[seq])
            self._sent = seq

    def poll(self) -> dict[str, torch.Tensor] | None:
        """Handle acknowledgements and heartbeats, resend a stale backlog; the newest weights received
        since the last call (also those that came in during `flush`), or None."""
        self._receive()
        weights, self._weights = self._weights, None
        return weights

    def _receive(self) -> None:
        self._watch_handshake()
        while self.socket.poll(0):
            try:
                kind, header, tensors = decode(self.socket.recv_multipart())
            except ProtocolError:
                continue  # the learner is trusted, so this is a version mismatch: nothing to act on
            self.last_heard = time.monotonic()
            run = header.get("run")
            if run is not None and run != self.learner_run:  # a (re)started learner: go back to the oldest now
                self.learner_restarts += self.learner_run is not None
                self.learner_run, self._sent, self._last_push = run, self.acked, time.monotonic()
            if kind == ACK and header["stream"] == self.stream:
                self._acknowledged(header["ack"])
            elif kind == REFUSED and header["stream"] == self.stream:
                self.refused = f"the learner refused message {header['seq']}: {header['reason']}"
            elif kind == WEIGHTS:  # a restarted learner counts versions from 0 again: take any
                self.weights_version, self._weights = header["version"], tensors
            elif kind == HEARTBEAT:
                self.learner_stats = header["stats"]
        now = time.monotonic()
        if now - max(self._last_push, self._progress) > self.resend_s:
            self._last_push = now
            if self.unacked and self.learner_alive:  # no progress: go back to the oldest unacknowledged
                self._sent = self.acked
            elif self.unacked:  # learner away: probe with the oldest; the backlog follows its acknowledgement
                self._push(self.unacked[self.acked + 1])
            else:
                self._push(encode(HELLO, {"actor": self.identity}, {}))  # a restarted learner: where to send heartbeats
        self._pump()

    def _acknowledged(self, ack: int) -> None:
        if ack < self.acked and self.unacked:
            # go-back-N can only resend what it still has: the learner lost messages it had acknowledged
            self.lost = (f"the learner stored only up to message {ack} of stream {self.stream}, but had acknowledged "
                         f"{self.acked}: its spool was lost or reset")  # fmt: skip
        if self.acked < ack < self.next_seq:
            self.acked, self._progress = ack, time.monotonic()
            self._sent = max(self._sent, ack)
            first = min(self.unacked)
            for seq in range(first, ack + 1):
                del self.unacked[seq]
            if self.outbox:
                self.outbox.acknowledged(first, ack)

    def _watch_handshake(self) -> None:
        while self.monitor.poll(0):
            event = zmq.utils.monitor.recv_monitor_message(self.monitor)["event"]
            message = _HANDSHAKE_EVENTS.get(event)
            self.handshake_error = message.format(identity=self.identity) if message else None
            self._key_refused = event == zmq.EVENT_HANDSHAKE_FAILED_AUTH

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until the learner has stored everything sent; False on timeout, or at once when waiting cannot
        help (a refused message or key, a learner that lost data); `problem` says why."""
        deadline = time.monotonic() + timeout_s
        while self.unacked and time.monotonic() < deadline and not (self.refused or self.lost or self._key_refused):
            self._receive()
            self.socket.poll(5)  # wait for the next packet, at most 5 ms
        return not self.unacked

    def close(self) -> None:
        self.socket.disable_monitor()
        self.monitor.close(0)
        self.socket.close(0)


class Outbox:
    """An actor's unacknowledged messages on disk, one file per message (written whole, fsynced,
    renamed into place), so an actor restarted on the same folder resends them in the same stream."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def load(self) -> tuple[str, dict[int, list[bytes]]]:
        """(stream, {seq: frames}) of the messages not known to be acknowledged; a new stream if none."""
        for tmp in self.dir.glob("*.tmp"):
            tmp.unlink()  # a write the actor died in: `send` never returned, so nothing was promised
        stream_file = self.dir / "stream"
        files = sorted(self.dir.glob("*.msg"))
        if files and not stream_file.exists():
            raise ValueError(f"{self.dir} holds messages but no stream file: move them away to start afresh")
        if not files:
            stream = secrets.token_hex(8)  # nothing pending: a fresh stream, numbered from 0
            write_durably(stream_file, stream.encode())
            return stream, {}
        return stream_file.read_text(), {int(f.stem): _read_frames(f) for f in files}

    def write(self, seq: int, frames: list[bytes]) -> None:
        data = len(frames).to_bytes(4, "little") + b"".join(len(f).to_bytes(8, "little") + f for f in frames)
        write_durably(self.dir / f"{seq:012d}.msg", data)

    def acknowledged(self, first: int, ack: int) -> None:
        for seq in range(first, ack + 1):  # oldest first: what is left is always a contiguous tail
            (self.dir / f"{seq:012d}.msg").unlink(missing_ok=True)


def _read_frames(path: Path) -> list[bytes]:
    data, frames, at = path.read_bytes(), [], 4
    for _ in range(int.from_bytes(data[:4], "little")):
        n = int.from_bytes(data[at : at + 8], "little")
        frames.append(data[at + 8 : at + 8 + n])
        at += 8 + n
    return frames


# ------------------------------------------------------------------------------------------------ learner


class LearnerServer:
    def __init__(self, address: str = "tcp://127.0.0.1:5555", keys: str | Path | None = None, insecure: bool = False,
                 next_seq: dict[tuple[str, str], int] | None = None, validate=None, heartbeat_s: float = 0.2):  # fmt: skip
        """`next_seq`: per (actor, stream), the first message not stored (from the spool); `validate(tensors)`:
        None, or why a message cannot be stored (it is then refused: not accepted, not acknowledged)."""
        _check_plaintext(address, insecure, keys)
        self.context = zmq.Context()  # its own: an authenticator serves one context
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self.authenticator, self.authorized = None, None  # z85 public key -> the actor name it may use
        if keys is not None:
            self._secure(Path(keys))
        self.socket.bind(address)
        self.address = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)  # the real port of tcp://...:0
        self.next_seq: dict[tuple[str, str], int] = dict(next_seq or {})
        self.stored = {k: n - 1 for k, n in self.next_seq.items()}  # per stream, the durable watermark
        self.validate = validate
        self.run = secrets.token_hex(8)  # tells actors when the learner restarted
        self.routes: dict[str, bytes] = {}  # actor -> routing id of its connection that last passed the checks
        self.heartbeat_s, self._last_beat = heartbeat_s, 0.0
        self.rejected = 0  # malformed, unauthorized or refused packets dropped
        self.stats: dict = {}  # counters sent with each heartbeat (updates, buffer sizes)

    def _secure(self, keys: Path) -> None:
        from zmq.auth.thread import ThreadAuthenticator

        authorized = keys / "authorized"
        if not authorized.is_dir():
            raise FileNotFoundError(f"no folder of authorized actor keys {authorized}: create it with `embodied keys {keys}`")
        self.authorized = {load_public(p).decode(): p.stem for p in sorted(authorized.glob("*.key"))}
        self.socket.curve_publickey, self.socket.curve_secretkey = load_secret(keys / "learner.key_secret")
        self.socket.curve_server = True
        self.authenticator = ThreadAuthenticator(self.context)  # ZAP: refuses unknown keys in the handshake
        self.authenticator.start()
        self.authenticator.configure_curve(domain="*", location=str(authorized))  # User-Id: the z85 public key

    def poll(self, timeout_ms: int = 0) -> list[tuple[str, str, int, TensorDict]]:
        """Accepted transitions, in order, each once: [(actor, stream, seq, TensorDict [B])]. Store each,
        then call `ack`; nothing is acknowledged before that."""
        accepted = []
        if self.socket.poll(timeout_ms):
            while self.socket.poll(0):
                route, *frames = self.socket.recv_multipart(copy=False)
                user = frames[0].get("User-Id") if self.authorized is not None and frames else None
                got = self.handle(route.bytes, user, [f.bytes for f in frames])
                if got is not None:
                    accepted.append(got)
        now = time.monotonic()
        if now - self._last_beat > self.heartbeat_s:
            self._last_beat = now
            for route in self.routes.values():
                self._send(route, encode(HEARTBEAT, {"stats": self.stats, "run": self.run}, {}))
        return accepted

    def handle(self, route: bytes, user: str | None, frames: list[bytes]):
        """One packet from the connection `route` (ZeroMQ's routing id; authenticated as public key `user`):
        (actor, stream, seq, TensorDict) when accepted, else None. Never raises on what a peer sent."""
        try:
            kind, header, tensors = decode(frames)
            if kind not in (TRANSITIONS, HELLO):
                raise ProtocolError(f"an actor sent a {kind!r} packet")
            actor = header["actor"]
            if self.authorized is not None and self.authorized.get(user) != actor:
                raise ProtocolError(f"key {user} may not speak as {actor!r}")  # one actor impersonating another
        except ProtocolError:
            self.rejected += 1
            return None
        self.routes[actor] = route  # replies go to this connection (an actor that reconnected has a new one)
        if kind == HELLO:
            return None
        stream, seq = (actor, header["stream"]), header["seq"]
        if seq != self.next_seq.get(stream, 0):  # a resend of something stored, or after a gap
            self._ack(route, stream)  # the durable watermark, never what is only accepted
            return None
        reason = self.validate(tensors) if self.validate else None
        if reason is None:
            try:
                transitions = unflat(tensors)
            except Exception as err:  # noqa: BLE001 - whatever tensordict objects to is the peer's fault
                reason = f"not a TensorDict: {err}"
        if reason is not None:
            self.rejected += 1
            self._send(route, encode(REFUSED, {"seq": seq, "stream": stream[1], "reason": reason[:500]}, {}))
            return None
        self.next_seq[stream] = seq + 1
        return actor, stream[1], seq, transitions

    def ack(self, actor: str, stream: str, seq: int) -> None:
        """`seq` of (actor, stream) and everything before it is durably stored: tell the actor."""
        key = (actor, stream)
        self.stored[key] = max(self.stored.get(key, -1), seq)
        if actor in self.routes:
            self._ack(self.routes[actor], key)

    def _ack(self, route: bytes, stream: tuple[str, str]) -> None:
        self._send(route, encode(ACK, {"ack": self.stored.get(stream, -1), "stream": stream[1], "run": self.run}, {}))

    def send_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        frames = encode(WEIGHTS, {"version": version}, state_dict)
        for route in self.routes.values():
            self._send(route, frames)

    def _send(self, route: bytes, frames: list[bytes]) -> None:
        try:
            self.socket.send_multipart([route, *frames], zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # that actor is not connected right now

    def close(self) -> None:
        self.socket.close(0)
        if self.authenticator is not None:
            self.authenticator.stop()
        self.context.term()
