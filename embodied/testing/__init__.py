"""Faithful fakes of simulators that cannot run on our CPU machines (Isaac Gym, Isaac Lab).

Each fake reproduces the public API and the step/reset ordering of the real
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
