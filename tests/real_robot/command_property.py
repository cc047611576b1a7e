"""The property every driver is held to (test_drivers_property.py; LeRobot's real classes: test_lerobot_real.py),
pytest-free so that it also runs in the LeRobot environment: random, adversarial and malformed commands, of which
nothing outside the limits (joint limits, max_step from the measured state) may reach the hardware, malformed
ones (wrong shape or dtype, NaN, inf) and stale ones are rejected, and nothing rejected reaches it."""

import time
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

finite_or_not = st.one_of(st.floats(-1e6, 1e6), st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -1e300, 0.0]))
not_real = st.one_of(hnp.boolean_dtypes(), hnp.complex_number_dtypes(), hnp.unicode_string_dtypes(),
                     hnp.byte_string_dtypes(), hnp.datetime64_dtypes(), hnp.timedelta64_dtypes())  # fmt: skip


def commands(dim):
    """(command, malformed): a malformed command must be rejected; a well-formed one may pass, clipped."""
    well_formed = st.one_of(
        hnp.arrays(np.float64, st.just((dim,)), elements=finite_or_not),  # any values (NaN, inf: rejected)
        hnp.arrays(np.float64, st.just((dim,)), elements=st.floats(-2, 2)),  # near the limits
        hnp.arrays(np.float32, st.just((dim,)), elements=st.floats(-2, 2, width=32)),
        st.lists(st.floats(allow_nan=True), min_size=dim, max_size=dim),
        st.lists(st.integers(-3, 3), min_size=dim, max_size=dim),  # integers are real numbers
    )
    malformed = st.one_of(
        hnp.arrays(np.float64, st.sampled_from([(dim - 1,), (dim + 1,), (1, dim), (), (0,)]), 
                   elements=st.floats(-1, 1)),
        st.lists(st.floats(-1, 1), max_size=dim - 1), st.lists(st.floats(-1, 1), min_size=dim + 1, max_size=dim + 3),
        hnp.arrays(not_real, st.just((dim,))),  # the right shape, not real numbers
        st.lists(st.integers(min_value=2**64), min_size=dim, max_size=dim),  # beyond numpy integers: objects
        st.lists(st.sampled_from(["0.1", b"0.1", None, 1j, True]), min_size=dim, max_size=dim),
        st.text(max_size=4), st.none(), st.dictionaries(st.integers(0, dim), st.floats(-1, 1)),
    )
    return st.one_of(well_formed.map(lambda c: (c, False)), malformed.map(lambda c: (c, True)))


def fire_commands(robot, hardware_log, max_examples: int = 40) -> dict[str, int]:
    """Run the property over `robot` (connected, at a control rate low enough that its watchdog stays out of the
    way between examples); hardware_log() lists what reached the hardware so far: (values in command units, kind).
    Returns how many commands were sent and rejected, so a caller can tell the property was not met vacuously."""
    dim, low, high = robot.action_spec.shape[0], robot.safety.low, robot.safety.high
    max_step = robot.config.safety.max_step
    tally = {"sent": 0, "rejected": 0}

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(batch=st.lists(st.tuples(commands(dim), st.floats(0, 0.5)), min_size=1, max_size=6))
    def check(batch):
        robot.clear_failsafe()
        before, passed, references = len(hardware_log()), 0, []
        for (command, malformed), age in batch:
            obs = robot.get_observation()
            reference = None if robot._measured is None else robot._measured.copy()  # what max_step refers to
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # e.g. numpy casting complex to real: nothing may be dropped
                sent = robot.send_action(command, stamp=obs["timestamp"] - age)
            tally["rejected" if sent is None else "sent"] += 1
            if sent is not None:
                passed += 1
                references.append(reference)
                assert not malformed and age <= robot.config.safety.max_command_age
                assert sent.shape == (dim,) and np.isfinite(sent).all()
        deadline = time.monotonic() + 1.0
        while len(hardware_log()) < before + passed and time.monotonic() < deadline:
            time.sleep(0.005)  # UDP: let the vehicle read what was sent
        received = hardware_log()[before:]
        assert len(received) == passed  # a rejected command never reached the hardware
        for (values, _), reference in zip(received, references):
            assert np.isfinite(values).all()
            assert np.all(values >= low - 1e-5) and np.all(values <= high + 1e-5)  # float32 on the wire
            if max_step is not None and reference is not None and reference.shape == values.shape:
                assert np.all(np.abs(values - reference) <= max_step + 1e-5)

    check()
    return tally
