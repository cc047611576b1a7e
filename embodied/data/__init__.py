"""Data: in-memory replay, a crash-safe zarr episode store, window samplers, LeRobot v3.0 import/export.

Only the replay API is imported here; the store and LeRobot modules load zarr / pyarrow / av when used.
"""

from embodied.data.replay import SOURCE, MixedSampler, ReplayBuffer, transitions_from_rollout

__all__ = ["SOURCE", "MixedSampler", "ReplayBuffer", "transitions_from_rollout"]
