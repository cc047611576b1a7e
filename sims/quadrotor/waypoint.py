"""The waypoint task: fly through K random waypoints in order, a torch-batched VecEnv (contract: `embodied.envs`).

Built on `env._QuadrotorEnv` (physics, randomization, observations, resets, snapshots; the layout of S and the
observation are documented in sims/quadrotor/env.py); this module adds the waypoint rows, reward terms and success rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from embodied.config import check
from sims.quadrotor.dynamics import POS, row_buffer
from sims.quadrotor.env import BASE_ROWS, F_TASK, PROGRESS, TARGET, QuadrotorConfig, _QuadrotorEnv

# Rows of S after BASE_ROWS for the waypoint task.
PREV_DIST = BASE_ROWS  # distance to the current waypoint after the previous step, m
WAYPOINTS = BASE_ROWS + 1  # first of 3K rows: x, y, z of waypoint 0, then 1, ...


@dataclass(frozen=True)
class WaypointConfig(QuadrotorConfig):
    """Fly through K random waypoints in order (QuadrotorWaypointEnv)."""

    episode_s: float = 8.0  # time limit, s
    max_pos: float = 3.0  # crash when the distance from the origin exceeds this, m
    num_waypoints: int = 4  # K
    waypoint_box: float = 1.0  # waypoints uniform in +-waypoint_box per axis, m
    reach_radius: float = 0.15  # a waypoint is reached within this distance, and the next becomes the target, m
    alive_bonus: float = 0.0  # 0: a per-step bonus would pay for dawdling instead of finishing
    w_pos: float = 0.0  # weight of the distance to the current waypoint, per m
    w_progress: float = 1.0  # reward per m/s of approach to the current waypoint
    reach_bonus: float = 5.0  # reward per waypoint reached

    def __post_init__(self):
        super().__post_init__()
        check(self.num_waypoints >= 1, f"num_waypoints={self.num_waypoints} must be >= 1")
        check(self.waypoint_box >= 0 and self.reach_radius > 0, "waypoint_box must be >= 0 and reach_radius > 0")
        check(math.sqrt(3) * self.waypoint_box < self.max_pos, "waypoints must lie within max_pos of the origin")


class QuadrotorWaypointEnv(_QuadrotorEnv):
    """Reach K waypoints (uniform in a box) in order; the next becomes the target within reach_radius.

    reward = w_progress (d_prev - d) / dt + reach_bonus [reached] - w_pos d + alive_bonus
             - w_vel |v| - w_ang_vel |w| - w_tilt (1 - R_zz) - w_action mean(a^2)
             - w_smooth mean((a - a_prev)^2) - crash_penalty [crash]
    with d the distance to the current waypoint and d_prev the distance to the same waypoint one
    step earlier (so switching targets causes no jump): ~1 per step at 1 m/s toward the target.
    Terminated: crash (|p| > max_pos, ...) or all K reached (success); else truncated at the limit.
    """

    Config = WaypointConfig
    _TASK_FEATURES = 3  # distance to the current waypoint, approach this step (m), reached
    _OBS_DIM = 25

    @property
    def _TASK_ROWS(self) -> int:  # noqa: N802 (overrides a class constant)
        return 1 + 3 * self.config.num_waypoints

    @property
    def _NOISE_ROWS(self) -> int:  # noqa: N802
        return 15 + 3 * self.config.num_waypoints

    def _progress_norm(self) -> float:
        return self.config.num_waypoints

    def _progress_max(self) -> float:
        return self.config.num_waypoints  # reaching the last one ends the episode

    def _task_weights(self, weights: list[float]) -> list[float]:
        c = self.config
        return weights + [-c.w_pos, c.w_progress / c.dt, c.reach_bonus]

    def _task_bind(self) -> None:
        k, n, c = self.config.num_waypoints, self.num_envs, self.config
        self._wp_rows = slice(WAYPOINTS, WAYPOINTS + 3 * k)
        self._target = self._s[TARGET].view(1, 3, n)
        self._e3 = row_buffer(3, n, self.device)
        self._wp_scale = torch.full((1, 1), 2 * c.waypoint_box, device=self.device)
        self._wp_bias = torch.full((1, 1), -c.waypoint_box, device=self.device)

    def _waypoint(self, s: torch.Tensor, index: torch.Tensor, out: torch.Tensor) -> None:
        """out [1, 3, k] = waypoint min(index, K - 1) of each env in s [rows, k] (index float [k])."""
        idx = index.clamp(max=self.config.num_waypoints - 1).long().view(1, 1, -1).expand(1, 3, -1)
        torch.gather(s[self._wp_rows].view(-1, 3, s.shape[1]), 0, idx, out=out)

    def _distance(self, s: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """out = |p - target| of the envs in s [rows, k]."""
        e = self._e3[:, : s.shape[1]]
        torch.sub(s[POS], s[TARGET], out=e).square_()
        return torch.sum(e, 0, keepdim=out.dim() == 2, out=out).sqrt_()

    def _task_sample(self, init: torch.Tensor, noise: torch.Tensor) -> None:
        waypoints = init[self._wp_rows]
        torch.addcmul(self._wp_bias, noise[15:], self._wp_scale, out=waypoints)
        init[TARGET].copy_(waypoints[0:3])  # progress restarts at 0: the first waypoint
        self._distance(init, init[PREV_DIST])

    def _task_update(self, crash: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, f = self._s, self._features
        dist = self._distance(s, f[F_TASK : F_TASK + 1])[0]
        reached = dist < self.config.reach_radius
        torch.sub(s[PREV_DIST], dist, out=f[F_TASK + 1])
        f[F_TASK + 2].copy_(reached)
        self._progress.add_(reached)
        finished = self._progress >= self.config.num_waypoints
        self._waypoint(s, self._progress, self._target)
        self._distance(s, s[PREV_DIST])
        return crash | finished, finished & ~crash

    def _task_observe(self, s: torch.Tensor, obs: torch.Tensor) -> None:
        nxt = obs[22:25]
        self._waypoint(s, s[PROGRESS] + 1, nxt.view(1, 3, -1))
        torch.sub(s[POS], nxt, out=nxt)

    def _blocks(self) -> dict[str, slice | int]:
        return {**super()._blocks(), "prev_dist": PREV_DIST, "waypoints": self._wp_rows}

    def get_state(self) -> dict[str, torch.Tensor]:
        """As the base, plus "prev_dist" [N] and "waypoints" [N, K, 3]."""
        state = super().get_state()
        state["waypoints"] = state["waypoints"].reshape(self.num_envs, -1, 3)
        return state
