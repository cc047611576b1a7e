"""The property every driver is held to (test_drivers_property.py; LeRobot's real classes: test_lerobot_real.py),
pytest-free so that it also runs in the LeRobot environment: random, adversarial and malformed commands (numpy
arrays, lists, torch tensors of any dtype, grad state, layout, device or stride, masked arrays, quaternions of any
norm, position targets along any path) with good and bad stamps (old, future, infinite, NaN, of the wrong type),
sent with and without a fresh observation in between. Checked on the hardware side, on what it received:
- nothing non-finite, nothing outside the limits (joint limits, motor range, fence);
- the step limit from where the hardware was when the command arrived (arms: the simulated hardware records it)
  or, for drones, from the position the driver measured for that command (telemetry is what it can know);
- attitudes unit quaternions (float32 on the wire), tilted at most max_tilt, turning at most max_rotation_step
  from the previous attitude;
- the straight segment from that reference to a position target outside every keep-out box;
- malformed commands and bad stamps are rejected, and nothing rejected reaches the hardware."""

import math
import time
import warnings

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from real_robot.safety import segment_hits_box, tilt_of

finite_or_not = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0]))
not_real = st.one_of(hnp.boolean_dtypes(), hnp.complex_number_dtypes(), hnp.unicode_string_dtypes(),
                     hnp.byte_string_dtypes(), hnp.datetime64_dtypes(), hnp.timedelta64_dtypes())  # fmt: skip
TORCH_REAL = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int16, torch.uint8]


@st.composite
def tensors(draw, dim: int):
    """A torch tensor of `dim` values near the limits: any real dtype, maybe requiring grad, maybe a strided view."""
    values = draw(hnp.arrays(np.float64, (dim,), elements=st.floats(-2, 2)))
    dtype = draw(st.sampled_from(TORCH_REAL))
    if draw(st.booleans()):  # every other element of a longer tensor: not contiguous
        t = torch.tensor(np.repeat(values, 2)).to(dtype)[::2]
    else:
        t = torch.tensor(values).to(dtype)
    if dtype.is_floating_point and draw(st.booleans()):
        t = (t.detach().clone().requires_grad_(True) * 1.0)  # a non-leaf with a grad_fn, as a policy's output
    return t


@st.composite
def quaternion_commands(draw, dim: int):
    """An attitude setpoint (w, x, y, z, thrust...) whose quaternion has any norm, direction and tilt: a yaw about z
    times a tilt about a horizontal axis (tilt angles around the limit), or any direction at all."""
    if not draw(st.booleans()):  # (hypothesis starts from False: level-ish attitudes first)
        yaw, tilt, heading = draw(st.floats(-math.pi, math.pi)), draw(st.floats(0, 1.2)), draw(st.floats(-3.2, 3.2))
        w1, z1 = math.cos(yaw / 2), math.sin(yaw / 2)
        w2, x2, y2 = math.cos(tilt / 2), math.sin(tilt / 2) * math.cos(heading), math.sin(tilt / 2) * math.sin(heading)
        axis = np.array([w1 * w2, w1 * x2 - z1 * y2, w1 * y2 + z1 * x2, z1 * w2])  # (w1, 0, 0, z1) * (w2, x2, y2, 0)
    else:
        axis = draw(hnp.arrays(np.float64, (4,), elements=st.floats(-1, 1)))
    norm = draw(st.sampled_from([1.0, 1.0, 1.0, 1.0 + 1e-7, 0.99, 1.01, 1.03, 0.5, 2.0, 1e-9, 0.0]))
    q = axis / max(np.linalg.norm(axis), 1e-12) * norm
    if draw(st.booleans()):
        q = -q  # the same rotation
    rest = draw(hnp.arrays(np.float64, (dim - 4,), elements=st.floats(-0.5, 1.5)))
    return np.concatenate([q, rest])


def MATRIX(dim: int) -> np.ndarray:
    """A numpy subclass (np.matrix: always 2-d, so the wrong shape here)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)  # "matrix is not recommended": that is the point
        return np.asmatrix(np.zeros(dim))


def commands(dim: int, attitude: bool = False):
    """(command, malformed): a malformed command must be rejected; a well-formed one may pass, clipped.
    attitude: the command starts with a quaternion (most commands are attitudes, of any norm and tilt)."""
    well_formed = st.one_of(
        hnp.arrays(np.float64, st.just((dim,)), elements=finite_or_not),  # any values (NaN, inf: rejected)
        hnp.arrays(np.float64, st.just((dim,)), elements=st.floats(-2, 2)),  # near the limits
        hnp.arrays(np.float32, st.just((dim,)), elements=st.floats(-2, 2, width=32)),
        hnp.arrays(np.float16, st.just((dim,)), elements=st.floats(-2, 2, width=16)),
        st.lists(st.floats(allow_nan=True), min_size=dim, max_size=dim),
        st.lists(st.integers(-3, 3), min_size=dim, max_size=dim),  # integers are real numbers
        tensors(dim),
        hnp.arrays(np.float64, (dim,), elements=st.floats(-2, 2)).map(np.ma.masked_array),  # nothing masked
    )
    if attitude:
        attitudes = quaternion_commands(dim)
        well_formed = st.one_of(attitudes, attitudes.map(torch.tensor), well_formed)
    malformed = st.one_of(
        hnp.arrays(np.float64, st.sampled_from([(dim - 1,), (dim + 1,), (1, dim), (), (0,)]),
                   elements=st.floats(-1, 1)),  # fmt: skip
        st.lists(st.floats(-1, 1), max_size=dim - 1), st.lists(st.floats(-1, 1), min_size=dim + 1, max_size=dim + 3),
        hnp.arrays(not_real, st.just((dim,))),  # the right shape, not real numbers
        st.lists(st.integers(min_value=2**64), min_size=dim, max_size=dim),  # beyond numpy integers: objects
        st.lists(st.sampled_from(["0.1", b"0.1", None, 1j, True]), min_size=dim, max_size=dim),
        st.text(max_size=4), st.none(), st.dictionaries(st.integers(0, dim), st.floats(-1, 1)),
        st.sampled_from([torch.zeros(dim, dtype=torch.bool), torch.zeros(dim, dtype=torch.complex64),
                         torch.zeros(dim, device="meta"), torch.zeros(dim).to_sparse(), torch.tensor(0.5),
                         torch.zeros(1, dim), torch.zeros(dim + 1), MATRIX(dim),
                         np.ma.masked_array(np.zeros(dim), mask=[True] + [False] * (dim - 1)),
                         [torch.tensor(0.1, requires_grad=True)] * dim]),  # fmt: skip
    )
    well_formed = well_formed.map(lambda c: (c, False))
    return st.one_of(well_formed, well_formed, malformed.map(lambda c: (c, True)))  # 2:1, so that some pass


# (kind, value): "age" s before the observation's stamp (stale beyond max_command_age), "future" s after it,
# "bad" a stamp that is no time at all; None: no stamp (no staleness check)
stamps = st.one_of(
    st.tuples(st.just("age"), st.floats(0, 0.04)),  # fresh for every driver (max_command_age >= 0.05)
    st.tuples(st.just("age"), st.floats(0, 0.04)),
    st.tuples(st.just("age"), st.floats(0, 0.5)),
    st.tuples(st.just("future"), st.floats(1.0, 1e6)),
    st.tuples(st.just("bad"), st.sampled_from([math.inf, -math.inf, math.nan, "0.0", b"0", True, 1j, [0.0]])),
    st.tuples(st.just("bad"), st.just("tensor")),
    st.just(("none", None)),
)


def stamp_of(kind: str, value, observed: float):
    if kind == "age":
        return observed - value
    if kind == "future":
        return observed + value
    if kind == "bad":
        return torch.tensor(observed) if value == "tensor" else value
    return None


def fire_commands(robot, hardware_log, max_examples: int = 40, batch_size: int = 6,
                  min_batch: int = 1) -> dict[str, int]:  # fmt: skip
    """Run the property over `robot` (connected, at a control rate low enough that its watchdog stays out of the
    way between examples). hardware_log() lists what reached the hardware so far as (values in command units,
    kind) or (values, kind, (where the hardware was when they arrived, how far it may have moved since it was last
    read)). Returns how many commands were sent and rejected, so a caller can tell the property was not met
    vacuously (and count them)."""
    safety, config = robot.safety, robot.config.safety
    dim, low, high = robot.action_spec.shape[0], safety.low, safety.high
    tally = {"sent": 0, "rejected": 0}

    one = st.tuples(commands(dim, safety.quat is not None), stamps, st.booleans())  # command, stamp, observe first

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(batch=st.lists(one, min_size=min_batch, max_size=batch_size))
    def check(batch):
        robot.clear_failsafe()
        before, passed, references = len(hardware_log()), 0, []
        obs = robot.get_observation()
        for (command, malformed), (stamp_kind, stamp_value), observe in batch:
            if observe:  # else: several commands on one observation, the arm moving on toward the last goal
                obs = robot.get_observation()
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # e.g. numpy casting complex to real: nothing may be dropped
                sent = robot.send_action(command, stamp=stamp_of(stamp_kind, stamp_value, obs["timestamp"]))
            tally["rejected" if sent is None else "sent"] += 1
            if sent is not None:
                passed += 1
                references.append(None if robot._measured is None else robot._measured.copy())  # what it stepped from
                assert not malformed and stamp_kind in ("age", "none")
                assert stamp_kind == "none" or stamp_value <= config.max_command_age
                assert sent.shape == (dim,) and np.isfinite(sent).all()
        deadline = time.monotonic() + 1.0
        while len(hardware_log()) < before + passed and time.monotonic() < deadline:
            time.sleep(0.005)  # UDP: let the vehicle read what was sent
        received = hardware_log()[before:]
        assert len(received) == passed  # a rejected command never reached the hardware
        previous = None  # the previous command of this batch (clear_failsafe forgot the ones before)
        for entry, measured in zip(received, references):
            values, present = entry[0], (entry[2] if len(entry) > 2 else None)
            assert values.shape == (dim,) and np.isfinite(values).all()
            assert np.all(values >= low - 1e-5) and np.all(values <= high + 1e-5)  # float32 on the wire
            reference, slack = (present if present is not None else (measured, 0.0))
            if reference is None:
                reference = previous  # nothing measured: the layer steps from the previous command
            if config.max_step is not None and reference is not None:
                assert np.all(np.abs(values - reference) <= config.max_step + slack + 1e-5), (values, reference)
            if safety.quat is not None:
                check_attitude(values[safety.quat], None if previous is None else previous[safety.quat], config)
            if config.keep_out:
                start = (reference if reference is not None else values)[safety.pos]
                for lo, hi in config.keep_out:  # shrunk by float32 rounding: a graze in float64 may touch in float32
                    assert not segment_hits_box(start, values[safety.pos], np.add(lo, 1e-4), np.subtract(hi, 1e-4))
            previous = values

    check()
    return tally


def check_attitude(q: np.ndarray, before: np.ndarray | None, config) -> None:
    assert abs(np.linalg.norm(q) - 1.0) <= 1e-5, q  # float32 on the wire
    if config.max_tilt is not None:
        assert tilt_of(q / np.linalg.norm(q)) <= config.max_tilt + 1e-4
    if config.max_rotation_step is not None and before is not None:
        turn = 2 * math.acos(min(1.0, abs(float(q @ before)) / np.linalg.norm(q) / np.linalg.norm(before)))
        assert turn <= config.max_rotation_step + 1e-3  # acos near 1 amplifies float32 rounding
