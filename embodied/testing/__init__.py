"""Faithful fakes of the third-party APIs that cannot run on our CPU machines, all in this one folder:
the simulators Isaac Gym and Isaac Lab (`fake_isaacgym.py`, `fake_isaaclab.py`), LeRobot's robot and motor-bus
classes (`fake_lerobot.py`, `fake_lerobot_bus.py`) and a Crazyflie radio link (`fake_crazyflie.py`).

Each simulator fake reproduces the public API and the step/reset ordering of the real
simulator exactly (buffers, dtypes, where auto-reset happens, which observation
is returned at a done step), over a small torch cart-pole instead of PhysX, so
the adapters in `sims/` can be tested here. They are fakes: nothing in them is
a physics reference, and every adapter also has `gpu`-marked tests that run
against the real simulator wherever it is installed.
"""

from embodied.testing.fake_isaacgym import FakeCartpoleTask, FakeVecTask
from embodied.testing.fake_isaaclab import (
    FakeCartpoleDirectEnv,
    FakeCartpoleManagerBasedEnv,
    FakeDirectRLEnv,
    FakeManagerBasedRLEnv,
)

__all__ = [
    "FakeCartpoleDirectEnv",
    "FakeCartpoleManagerBasedEnv",
    "FakeCartpoleTask",
    "FakeDirectRLEnv",
    "FakeManagerBasedRLEnv",
    "FakeVecTask",
]
