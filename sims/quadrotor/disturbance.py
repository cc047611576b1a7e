"""Disturbance presets for the quadrotor tasks: pushes, gusts, a payload, weak or slow motors.

    embodied eval <run> --disturbance gust        # evaluate a trained policy under a preset
    embodied train experiment=quadrotor_hover env.disturbance=mix   # train with them (domain randomization)
    ... env.privileged_disturbance=true   # and the (asymmetric) critic sees the draws: `Disturbances.observe`

A preset draws, once per episode and on top of the nominal randomization (dr_mass, dr_thrust,
dr_motor_tau), the components it names:

    push     one kick at a time uniform in [15%, 50%] of the episode: velocity + dv, |dv| uniform
             in [0.5, 1] m/s in a uniform direction, and body rates + uniform +-1 rad/s per axis
    gust     wind from a uniform horizontal direction, starting at a time uniform in [15%, 50%] of
             the episode, acting through linear rotor drag F = k_d (wind - v) (the drag acts the
             whole episode); the wind's steady force is uniform in [5%, 12.5%] of the weight
    payload  mass x U[1.2, 1.3], inertia x U[1.2, 1.5]
    motor    thrust coefficient x U[0.75, 0.85] on one random rotor (half the episodes) or on all
             four; motor time constant x U[1.3, 1.6]
    all      all four at once
    mix      one of none, push, gust, payload, motor per episode (1/5 each): for training

The window [15%, 50%] leaves hover at least 0.5 s to recover before its success window (the final
1 s of 3 s). The draws come from a generator of their own, seeded from the reset seed: under every
preset the episodes start from the same initial states as the nominal ones (a paired comparison),
a component draws the same values alone as within `all`, and `none` adds no rows, no draws and no
operations (bit-for-bit the nominal env). `episode_rows` draws one episode's rows outside an env, for a
simulator whose flights are not the env's episodes (the MAVLink vehicle, real_robot/sim/quadrotor_body.py).
"""

from __future__ import annotations

import math

import torch

from sims.quadrotor.dynamics import ANG_VEL, STATE_DIM, VEL, CrazyflieParams

PRESETS = {
    "none": (),
    "push": ("push",),
    "gust": ("gust",),
    "payload": ("payload",),
    "motor": ("motor",),
    "all": ("push", "gust", "payload", "motor"),
    "mix": ("push", "gust", "payload", "motor"),  # one per episode, drawn from MIXED
}
COMPONENTS = ("push", "gust", "payload", "motor")
MIXED = ("none", *COMPONENTS)  # mix: each with probability 1/5, for training (domain randomization)

# Magnitudes and their sources.
# push: the largest initial velocity and body rates learning-to-fly's policies learn to recover from,
# 1 m/s and 1 rad/s (rl-tools/rl-tools include/rl_tools/rl/environments/l2f/parameters/init/default.h,
# `init_90_deg`); the kick lands mid-flight, after the policy has settled.
PUSH_SPEED = (0.5, 1.0)  # m/s
PUSH_RATE = 1.0  # rad/s per axis
WINDOW = (0.15, 0.5)  # push time and gust onset, fraction of the episode
# gust: learning-to-fly randomizes a constant disturbance force up to disturbance_force_max = 0.1 of the
# surplus thrust-to-weight (l2f/parameters/default.h, domain_randomization; sampled in l2f/operations_generic.h),
# i.e. 0.1 * (2.25 - 1) = 12.5% of the weight for the Crazyflie.
GUST_FORCE = (0.05, 0.125)  # steady wind force, fraction of the nominal weight
# Rotor drag F = -K sum(omega_i) v, K = 9.1785e-7 (x, y) and 10.311e-7 (z) kg/rad (Foerster 2015, "System
# identification of the Crazyflie 2.0 nano quadrocopter", ETH; gym-pybullet-drones' cf2x.urdf uses them),
# here linearised at the nominal hover rotor speed: k_d = K * 4 * 1516 rad/s = 5.6e-3 N s/m in x, y. A wind
# of 2.4-5.9 m/s then gives GUST_FORCE. Applied in the world frame (the body frame of a level vehicle).
DRAG_XY, DRAG_Z = 9.1785e-7, 10.311e-7  # kg/rad
# payload: the Crazyflie 2.1 carries at most 15 g (56% of its 27 g, Bitcraze's datasheet); 20-30% is
# 5.4-8.1 g, e.g. an expansion deck plus a larger battery. Mounted off the centre, it adds inertia too.
PAYLOAD_MASS = (1.2, 1.3)
PAYLOAD_INERTIA = (1.2, 1.5)
# motor: beyond the training randomization (dr_thrust +-10%, dr_motor_tau +-30%): a chipped propeller or
# a tired motor/battery (the -15..-25% of issue 21's brief), and slower spin-up.
MOTOR_THRUST = (0.75, 0.85)
MOTOR_TAU = (1.3, 1.6)

# Rows of the disturbance block D [ROWS, N] (appended to the env's state S).
MASS, INERTIA, TAU = 0, 1, 2  # multipliers of the randomized mass, the inertia, the motor time constant
ROTOR_KF = slice(3, 7)  # per-rotor thrust coefficient multipliers
PUSH_STEP, PUSH_DV, PUSH_DW = 7, slice(8, 11), slice(11, 14)  # step of the kick; its velocity and rate change
GUST_STEP, WIND, DRAG = 14, slice(15, 18), 18  # wind onset step; wind velocity, world, m/s; drag on (1) or off (0)
ROWS = 19
NOISE_ROWS = 17  # uniform draws per episode, all drawn whatever the preset
# Rows of the critic's view of D (`Disturbances.observe`, the env's obs["privileged"] with privileged_disturbance),
# each 0 where its component is not drawn and within [-1, 1]:
#   0:3 (mass, inertia, motor time constant multiplier - 1) / the preset's largest excess (0.3, 0.5, 0.6)
#   3:7 (per-rotor thrust multiplier - 1) / 0.25 (the weakest draw)
#   7 the push is still to come (its step not yet reached)   8 it has happened (the kick is now in the state)
#   9 rotor drag acts (gust episodes)   10 the gust is still to come   11:13 the wind acting now, x and y (z is 0),
#   / the largest drawn wind speed
PRIVILEGED_ROWS = 13


def _uniform(u: torch.Tensor, bounds: tuple[float, float]) -> torch.Tensor:
    return bounds[0] + (bounds[1] - bounds[0]) * u


class Disturbances:
    """The per-episode draws of one preset (`sample`) and their effect on a step (`apply`)."""

    def __init__(self, preset: str, block: torch.Tensor, s: torch.Tensor, episode_steps: int, params: CrazyflieParams):
        """block: the rows D of the env's state S [rows, N] (a view), s: S itself."""
        self.components, self.mix = set(PRESETS[preset]), preset == "mix"
        self.block, self.episode_steps = block, episode_steps
        n, dev = block.shape[1], block.device
        self._vel, self._ang_vel = s[VEL], s[ANG_VEL]
        self._gen = torch.Generator(device=dev)
        self._gen.seed()
        self._noise = torch.zeros(NOISE_ROWS, n, device=dev)
        self._kf, self._inv_inertia, self._ext = (torch.zeros(rows, n, device=dev) for rows in (4, 1, 3))
        self._hit, self._active = torch.zeros(1, n, device=dev), torch.zeros(1, n, device=dev)
        hover_omega = 4 * params.hover_fraction * params.max_rpm * 2 * math.pi / 60  # rad/s, summed over rotors
        drag = torch.tensor([DRAG_XY, DRAG_XY, DRAG_Z], device=dev).view(3, 1) * hover_omega  # N s/m
        self._drag_per_mass = drag / params.mass  # 1/s, times 1 / the mass multiplier
        self._weight = params.mass * params.gravity
        self._drag_xy = DRAG_XY * hover_omega
        excess = [PAYLOAD_MASS[1] - 1, PAYLOAD_INERTIA[1] - 1, MOTOR_TAU[1] - 1] + [1 - MOTOR_THRUST[0]] * 4
        self._priv_scale = torch.tensor([1 / x for x in excess], device=dev).view(-1, 1)
        self._priv_bias = -self._priv_scale
        self._inv_max_wind = self._drag_xy / (GUST_FORCE[1] * self._weight)  # 1 / the largest wind speed, s/m

    def seed(self, seed: int) -> None:
        self._gen.manual_seed(seed + 104_729)  # an offset, so the stream differs from the env's own

    def get_rng(self) -> torch.Tensor:
        return self._gen.get_state()

    def set_rng(self, state: torch.Tensor) -> None:
        self._gen.set_state(state.cpu())

    def draw(self, k: int) -> None:
        """The uniform draws of the next `sample` of k candidates."""
        self._noise[:, :k].uniform_(generator=self._gen)

    def sample(self, out: torch.Tensor) -> None:
        """Fill D rows of k next-episode candidates, out [ROWS, k], from the draws `draw(k)` left; a component not
        drawn has no effect."""
        u = self._noise[:, : out.shape[1]]
        pick = (len(MIXED) * u[16]).floor()  # mix: one of MIXED per episode
        on = {c: (pick == MIXED.index(c)) if self.mix else torch.full_like(pick, c in self.components, dtype=torch.bool)
              for c in COMPONENTS}
        out[MASS] = torch.where(on["payload"], _uniform(u[0], PAYLOAD_MASS), 1.0)
        out[INERTIA] = torch.where(on["payload"], _uniform(u[1], PAYLOAD_INERTIA), 1.0)
        out[TAU] = torch.where(on["motor"], _uniform(u[2], MOTOR_TAU), 1.0)
        rotor = (4 * u[4]).floor().clamp(max=3)
        weak = (u[5] < 0.5) | (torch.arange(4, device=u.device).view(4, 1) == rotor)  # all four, or one
        out[ROTOR_KF] = torch.where(weak & on["motor"], _uniform(u[3], MOTOR_THRUST), 1.0)
        kick_step = (_uniform(u[6], WINDOW) * self.episode_steps).floor()
        out[PUSH_STEP] = torch.where(on["push"], kick_step, -1.0)  # -1: never
        z, azimuth = 2 * u[7] - 1, 2 * math.pi * u[8]  # a uniform direction on the sphere
        r = (1 - z * z).clamp(min=0).sqrt()
        direction = torch.stack([r * azimuth.cos(), r * azimuth.sin(), z])
        out[PUSH_DV] = direction * _uniform(u[9], PUSH_SPEED) * on["push"]
        out[PUSH_DW] = (2 * u[10:13] - 1) * PUSH_RATE * on["push"]
        out[GUST_STEP] = torch.where(on["gust"], (_uniform(u[13], WINDOW) * self.episode_steps).floor(), -1.0)
        azimuth = 2 * math.pi * u[14]
        speed = _uniform(u[15], GUST_FORCE) * self._weight / self._drag_xy  # m/s
        out[WIND] = torch.stack([azimuth.cos(), azimuth.sin(), torch.zeros_like(azimuth)]) * speed * on["gust"]
        out[DRAG] = on["gust"].float()

    def apply(self, dr: torch.Tensor, inv_dr: torch.Tensor, step: torch.Tensor):
        """Before a physics step: kick the envs due a push, and return what the dynamics integrate with.

        dr [3, N] the randomized multipliers (mass, thrust, motor time constant); inv_dr [3, N] their
        reciprocals, whose mass and time-constant rows are divided here by the payload's and the motor's;
        step [N] steps since reset. Returns (per-rotor thrust multipliers [4, N], 1 / inertia multiplier
        [1, N], external acceleration [3, N] or None).
        """
        d = self.block
        torch.mul(d[ROTOR_KF], dr[1:2], out=self._kf)
        inv_dr[0].div_(d[MASS])
        inv_dr[2].div_(d[TAU])
        torch.reciprocal(d[INERTIA : INERTIA + 1], out=self._inv_inertia)
        if "push" in self.components:
            torch.eq(step, d[PUSH_STEP], out=self._hit[0])
            self._vel.addcmul_(d[PUSH_DV], self._hit)
            self._ang_vel.addcmul_(d[PUSH_DW], self._hit)
        if "gust" not in self.components:
            return self._kf, self._inv_inertia, None
        torch.ge(step, d[GUST_STEP], out=self._active[0])
        torch.mul(d[WIND], self._active, out=self._ext).sub_(self._vel)  # air velocity relative to the body
        self._ext.mul_(self._drag_per_mass).mul_(inv_dr[0:1]).mul_(d[DRAG : DRAG + 1])
        return self._kf, self._inv_inertia, self._ext

    def observe(self, d: torch.Tensor, step: torch.Tensor, out: torch.Tensor) -> None:
        """out [PRIVILEGED_ROWS, k] = the critic's view (rows above) of the draws d [ROWS, k] of envs that have taken
        step [k] steps since their reset: what acts on their next step, and which timed events are still to come."""
        torch.addcmul(self._priv_bias, d[: ROTOR_KF.stop], self._priv_scale, out=out[0:7])
        torch.ge(d[PUSH_STEP], step, out=out[7])  # a push lands on the step taken at step == PUSH_STEP (apply)
        torch.ge(d[PUSH_STEP], 0, out=out[8]).sub_(out[7])  # drawn and not pending (-1: never drawn)
        out[9].copy_(d[DRAG])
        torch.gt(d[GUST_STEP], step, out=out[10])  # the wind blows from the step taken at step == GUST_STEP
        wind = d[WIND.start : WIND.start + 2]
        torch.addcmul(wind, wind, out[10:11], value=-1, out=out[11:13]).mul_(self._inv_max_wind)


def episode_rows(preset: str, seed: int, episode_steps: int,
                 params: CrazyflieParams = CrazyflieParams()) -> torch.Tensor:  # fmt: skip
    """The rows D [ROWS] of one episode of `episode_steps` under `preset`: what a one-env quadrotor env with that
    episode length draws on `reset(seed=seed)` (tests/real_robot/test_vehicle_disturbance.py checks it)."""
    block = torch.zeros(ROWS, 1)
    draws = Disturbances(preset, block, torch.zeros(STATE_DIM, 1), episode_steps, params)
    draws.seed(seed)
    draws.draw(1)
    draws.sample(block)
    return block[:, 0]
