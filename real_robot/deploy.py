"""Deploy a trained policy on a robot at a fixed rate, logging every command and observation.

    embodied deploy runs/quadrotor_hover/<run> robot=mavlink --dry-run --steps 500
    embodied deploy <run> robot=sim_arm --episodes 3
    embodied deploy <run> --export exported/          # TorchScript, ONNX and C (MLP policies; C: state-only)

The policy, the robot (kind `robot` in the registry, or a preset in configs/robot/) and the
training env meet here, through their contracts. The training env, rebuilt from the
checkpoint's config with one instance, is the observation model (`TwinAdapter`): each robot
observation overwrites the env snapshot entries of the same name (position, velocity, ... or
qpos, qvel) and `set_state` returns the observation exactly as the policy saw it in training;
stepping the twin with the policy's action keeps the task's own bookkeeping (previous action,
motor-speed estimate) and, for robots with an `action_key`, integrates the action into the
setpoint the robot takes (an arm's joint-velocity action -> goal joint positions).
`--dry-run` swaps the hardware for its simulator: MAVLink -> the MAVLink vehicle simulator on
UDP loopback, Crazyflie -> the fake Crazyflie on cflib's UDP link, LeRobot arms -> the simulated arm.
`--disturbance <preset>` (dry run, MAVLink) flies the quadrotor env's disturbance presets in the vehicle
simulator's physics, their timings drawn for the flight of `steps` commands (real_robot/sim/mavlink_vehicle.py).
Each episode is appended to an episode store (`embodied.data.store`, zarr) under the log dir.

Before anything connects (`check_fit`, also against the real robot's specs in a dry run): what the twin hands
the robot (the policy's action, or the snapshot entry `action_key`) must have the robot's `action_spec` shape,
and every robot observation the twin copies must have its snapshot entry's shape; where both sides declare a
`Spec.meaning` (the env in `snapshot_meaning`), the meanings must be equal. A misfit is refused with one error
naming each spec, both shapes and both meanings; a meaning left undeclared on either side is refused too, unless
`allow_unchecked`. Snapshot entries the env declares that the robot does not measure are simulated open-loop by
the twin: logged at start and listed in every episode summary (`unmeasured`).
A robot that does not follow the policy is a failed deploy, not a good flight: each summary counts the commands
the safety layer rejected, and an episode with more than `max_rejected_fraction` of them rejected (a misfit the
check cannot see: limits, a stale loop) reports no tracking figures and raises `DeployError` once it is stored.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from embodied import keys, registry
from embodied.config import check
from embodied.runner import checkpoint
from embodied.build import make_policy

ROBOT_PRESETS = Path(__file__).resolve().parents[1] / "configs" / "robot"
# what the twin switches off: it must never end or randomize an episode by itself
_TWIN_OVERRIDES = {"episode_s": 1e6, "max_episode_steps": 10**9, "hold_steps": 10**9 - 1, "max_pos": 1e4,
                   "max_speed": 1e4, "max_ang_vel": 1e4, "dr_mass": 0.0, "dr_thrust": 0.0, "dr_motor_tau": 0.0}  # fmt: skip
_DRY_RUN = {"so100": "sim_arm", "so101": "sim_arm", "koch": "sim_arm"}  # LeRobot arms -> the simulated arm
log = logging.getLogger(__name__)


class DeployError(RuntimeError):
    """The robot did not follow the policy (its commands were rejected); `summaries` holds the episodes so far."""

    def __init__(self, message: str, summaries: list[dict[str, Any]]):
        super().__init__(message)
        self.summaries = summaries


@dataclass
class DeploySettings:
    robot: str = "sim_arm"  # registry name or configs/robot/<preset>.yaml
    robot_params: dict[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    episodes: int = 1
    steps: int = 500  # control steps per episode
    control_hz: float | None = None  # None: the training env's rate (1 / dt)
    course: list[tuple[float, float, float]] | None = None  # waypoints for a position-error task (drones)
    reach_radius: float = 0.15  # m: a waypoint counts as reached within this distance
    carrot: float = 0.4  # m: the target handed to the policy is at most this far ahead (in its training range)
    log_dir: Path | None = None
    status: bool = True  # live status on the terminal (rich)
    allow_unchecked: bool = False  # deploy although a policy/robot pair has a meaning undeclared (shapes still checked)
    max_rejected_fraction: float = 0.5  # more of an episode's commands rejected by the safety layer: DeployError
    disturbance: str = "none"  # dry run, MAVLink: a disturbance preset in the vehicle simulator's physics
    disturbance_seed: int = 0  # seed of the preset's draws
    seed: int = 0  # the twin's draws (a goal, a target the robot does not measure): episode i resets it with seed + i

    def __post_init__(self):
        fraction = self.max_rejected_fraction
        check(0 <= fraction < 1, f"max_rejected_fraction={fraction} must be in [0, 1)")
        check(self.disturbance == "none" or self.dry_run,
              f"disturbance={self.disturbance!r} acts in a simulator's physics: it needs a dry run (--dry-run)")


def load_robot_spec(name: str, overrides: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A preset in configs/robot/ or a registry name -> (registry name, params). Safety limits left
    unset keep the robot's defaults (`real_robot.safety.fill_defaults`)."""
    preset = ROBOT_PRESETS / f"{name}.yaml"
    spec = yaml.safe_load(preset.read_text()) or {} if preset.exists() else {"name": name}
    name = spec.pop("name")
    if name not in registry.names("robot"):
        presets = sorted(p.stem for p in ROBOT_PRESETS.glob("*.yaml"))
        raise KeyError(f"unknown robot {name!r}; valid choices: {', '.join(sorted(set(registry.names('robot')) | set(presets)))}")
    return name, {**spec, **overrides}


def check_fit(env, robot, allow_unchecked: bool = False) -> list[str]:
    """Refuse a twin `env` (the policy's training env) and a `robot` that do not fit (module doc), before the robot
    is connected: one ValueError naming every misfit. Returns the snapshot entries the env declares in
    `snapshot_meaning` that the robot does not measure: the twin simulates them open-loop."""
    env.reset(seed=0)
    snapshot = env.get_state()
    meanings = getattr(env, "snapshot_meaning", {})  # an env without it declares no meanings
    twin, name = type(env).__name__, type(robot).__name__
    misfits, unchecked = [], []

    def compare(what: str, ours: str, shape: tuple[int, ...], meaning: str | None, theirs: str, spec) -> None:
        line = f"{what}: {ours} {_describe(shape, meaning)} vs {name}.{theirs} {_describe(spec.shape, spec.meaning)}"
        if tuple(shape) != tuple(spec.shape) or (meaning and spec.meaning and meaning != spec.meaning):
            misfits.append(line)
        elif not (meaning and spec.meaning):
            unchecked.append(line)

    key = getattr(robot, "action_key", None)  # the snapshot entry the robot takes as its command, or None: the action
    if key is None:
        compare("action", f"the policy's action {twin}.action_spec", env.action_spec.shape, env.action_spec.meaning,
                "action_spec", robot.action_spec)  # fmt: skip
    elif key in snapshot:
        compare("action", f"the twin's {key!r} after a step ({twin} snapshot)", snapshot[key].shape[1:],
                meanings.get(key), "action_spec", robot.action_spec)  # fmt: skip
    else:
        spec = robot.action_spec
        misfits.append(f"action: {twin}'s snapshot has no {key!r} vs {name}.action_spec "
                       f"{_describe(spec.shape, spec.meaning)} (the twin's {key!r} is its command)")  # fmt: skip
    shared = [k for k in robot.observation_spec if k in snapshot]
    if not shared:
        misfits.append(f"observations: {name} observes {sorted(robot.observation_spec)}, none of which {twin}'s "
                       f"snapshot has ({sorted(snapshot)}): no observation model")  # fmt: skip
    for k in shared:
        compare(f"observation {k!r}", f"{twin} snapshot", snapshot[k].shape[1:], meanings.get(k),
                f"observation_spec[{k!r}]", robot.observation_spec[k])  # fmt: skip
    if not allow_unchecked:
        misfits += [f"{line}: unchecked (declare Spec.meaning / the env's snapshot_meaning, or --allow-unchecked)"
                    for line in unchecked]  # fmt: skip
    if misfits:
        raise ValueError(f"the policy ({twin}) and the robot ({name}) do not fit:\n  " + "\n  ".join(misfits))
    for line in unchecked:
        log.warning("deploy: not checked (allow_unchecked): %s", line)
    unmeasured = [k for k in meanings if k not in robot.observation_spec]
    if unmeasured:
        log.warning("deploy: %s does not measure %s: the twin simulates them open-loop", name,
                    ", ".join(f"{k} ({meanings[k]})" for k in unmeasured))  # fmt: skip
    return unmeasured


def _describe(shape: tuple[int, ...], meaning: str | None) -> str:
    return f"{list(shape)} " + (f'"{meaning}"' if meaning else "(meaning undeclared)")


class TwinAdapter:
    """Robot observations -> policy observations through the training env (see the module doc); implements
    real_robot.robot_env.Adapter."""

    def __init__(self, env, robot, settings: DeploySettings):
        self.env, self.robot, self.settings = env, robot, settings
        self.observation_spec, self.action_spec = env.observation_spec, env.action_spec
        env.reset(seed=0)
        self.snapshot = env.get_state()
        self.shared = [k for k in robot.observation_spec if k in self.snapshot]
        if not self.shared:
            raise ValueError(f"robot {type(robot).__name__} observes {sorted(robot.observation_spec)}, none of which "
                             f"the env's state has ({sorted(self.snapshot)}): no observation model")  # fmt: skip
        self.action_key = getattr(robot, "action_key", None)
        self.waypoint, self.target = 0, None

    @torch.no_grad()
    def warm_up(self, policy, steps: int = 50) -> None:
        """Run the twin and the policy a few times before the robot moves: first calls are ~10x slower."""
        from tensordict import TensorDict

        for _ in range(steps):
            obs = self.env.set_state(self.env.get_state())
            self.action(policy.act(TensorDict(dict(obs.items()), [1]), deterministic=True).action[0])
        self.env.reset(seed=0)
        self.snapshot = self.env.get_state()

    def reset(self, robot_obs: dict[str, Any], seed: int | None = None) -> None:
        """A new episode of the twin, drawn with `seed` (deploy's episode i: --seed + i), else from where the twin's
        generator stands (a VecEnv's reset without a seed): a correction session's next episode (and RobotEnv's reset
        when an episode ends) gets its own draw of what no sensor measures (a waypoint's target)."""
        self.env.reset(seed=seed)
        self.snapshot = self.env.get_state()
        self.waypoint = 0

    def observe(self, robot_obs: dict[str, Any]) -> dict[str, torch.Tensor]:
        s = self.snapshot
        for k in self.shared:
            s[k][0] = torch.as_tensor(np.asarray(robot_obs[k])).to(s[k].dtype).reshape(s[k][0].shape)
        if self.settings.course and "position" in robot_obs and "target" in s:
            s["target"][0] = torch.as_tensor(self._course_target(np.asarray(robot_obs["position"], np.float64)))
        obs = self.env.set_state(s)
        return {k: v[0] for k, v in obs.items()}

    def _course_target(self, position: np.ndarray) -> np.ndarray:
        course = self.settings.course
        waypoint = np.asarray(course[self.waypoint])
        if np.linalg.norm(position - waypoint) < self.settings.reach_radius and self.waypoint < len(course) - 1:
            self.waypoint += 1
            waypoint = np.asarray(course[self.waypoint])
        offset = waypoint - position
        distance = float(np.linalg.norm(offset))
        self.target = waypoint if distance <= self.settings.carrot else position + offset * self.settings.carrot / distance
        return self.target.astype(np.float32)

    def action(self, action: torch.Tensor) -> np.ndarray:
        self.env.step(action.unsqueeze(0))
        self.snapshot = self.env.get_state()
        if self.action_key is not None:
            return self.snapshot[self.action_key][0].numpy().astype(np.float64)
        return action.detach().numpy().astype(np.float64)

    def sent(self, command: np.ndarray | None) -> None:
        pass

    def reward(self, robot_obs: dict[str, Any]) -> tuple[float, bool]:
        return 0.0, False

    def position_error(self, robot_obs: dict[str, Any]) -> float | None:
        """Distance to the current waypoint (course) or to the task's target, m."""
        if "position" not in robot_obs:
            return None
        goal = np.asarray(self.settings.course[self.waypoint]) if self.settings.course else self.snapshot["target"][0].numpy()
        return float(np.linalg.norm(np.asarray(robot_obs["position"]) - goal))


def build_robot(settings: DeploySettings, stack: ExitStack, hz: float = 100.0):
    """The robot to fly; with dry_run, its simulator is started (and stopped by `stack`). hz: the control rate,
    so that a disturbance preset's timings fall within the flight of `settings.steps` commands."""
    name, params = load_robot_spec(settings.robot, settings.robot_params)
    if settings.disturbance != "none" and name != "mavlink":
        raise ValueError(f"disturbance={settings.disturbance!r}: the presets act in the MAVLink vehicle simulator "
                         f"(a robot=mavlink_sitl dry run); robot {name!r} has none")  # fmt: skip
    if settings.dry_run:
        if name in _DRY_RUN:
            name, params = _DRY_RUN[name], {}
        elif name == "mavlink":
            from real_robot.sim.mavlink_vehicle import MavlinkVehicleConfig, MavlinkVehicleProcess

            vehicle = MavlinkVehicleConfig(disturbance=settings.disturbance, disturbance_seed=settings.disturbance_seed,
                                           disturbance_s=settings.steps / hz)  # fmt: skip
            vehicle = stack.enter_context(MavlinkVehicleProcess(vehicle))
            params = {**params, "url": f"udpout:127.0.0.1:{vehicle.port}"}
        elif name == "crazyflie":
            from embodied.testing.fake_crazyflie import FakeCrazyflie

            fake = stack.enter_context(FakeCrazyflie())
            params = {**params, "uri": fake.uri}
    return registry.build("robot", name, params)


def build_twin(config: dict):
    """The training env of a run config as the robot's observation model: one env, its time limits lifted."""
    env_params = {k: v for k, v in config["env"].items() if k != "name"}
    fields = registry.resolve("env", config["env"]["name"]).Config.__dataclass_fields__
    return registry.build("env", config["env"]["name"],
                          {**env_params, **{k: v for k, v in _TWIN_OVERRIDES.items() if k in fields}}, num_envs=1)


def control_hz(twin, requested: float | None) -> float:
    """The requested control rate, else the training env's (1 / its step), else 50 Hz."""
    dt = getattr(twin.config, "dt", None) or getattr(twin.config, "control_dt", None)
    return requested or (1.0 / dt if dt else 50.0)


def robot_env(config: dict, robot: str, robot_params: dict, steps: int, hz: float | None, stack: ExitStack):
    """A robot (registry name or configs/robot preset) as a one-env VecEnv observed through the run config's env as
    its twin, as a correction session or `embodied record --teleop` drive it: the fit is checked before anything
    moves, every command passes the safety layer; closed by `stack`."""
    from real_robot.robot_env import RobotEnv, RobotEnvConfig

    twin = build_twin(config)
    settings = DeploySettings(robot=robot, robot_params=robot_params, steps=steps)
    hardware = build_robot(settings, stack)
    check_fit(twin, hardware)  # as deploy: a policy that does not fit the robot is refused before anything moves
    env = RobotEnv(hardware, RobotEnvConfig(control_hz=control_hz(twin, hz), max_episode_steps=steps),
                   TwinAdapter(twin, hardware, settings))  # fmt: skip
    stack.callback(env.close)
    return env


def deploy(path: Path, settings: DeploySettings) -> list[dict[str, float]]:
    """Run the policy at `path` on the robot; returns per-episode summaries."""
    from real_robot.robot_env import RobotEnv, RobotEnvConfig

    ckpt = checkpoint.find_checkpoint(path)
    config = checkpoint.load_config(ckpt)
    torch.set_num_threads(1)
    # a thread waiting for the GIL waits up to the switch interval (5 ms by default): half a 100 Hz period
    sys.setswitchinterval(0.0005)
    twin_env = build_twin(config)
    policy = make_policy(config, twin_env)
    policy.load_state_dict(checkpoint.load_model(ckpt, twin_env.device))
    policy.eval()
    hz = control_hz(twin_env, settings.control_hz)
    summaries = []
    with ExitStack() as stack:
        # the robot as configured, not connected: a misfit is refused before any simulator starts or anything moves;
        # in a dry run these are the hardware's specs (a dry run must refuse what the hardware would refuse)
        hardware = registry.build("robot", *load_robot_spec(settings.robot, settings.robot_params))
        unmeasured = check_fit(twin_env, hardware, settings.allow_unchecked)
        robot = build_robot(settings, stack, hz) if settings.dry_run else hardware
        if type(robot) is not type(hardware):  # a dry run's stand-in (LeRobot arm -> the simulated arm) must fit too
            check_fit(twin_env, robot, settings.allow_unchecked)
        adapter = TwinAdapter(twin_env, robot, settings)
        adapter.warm_up(policy)
        env = RobotEnv(robot, RobotEnvConfig(control_hz=hz, max_episode_steps=settings.steps), adapter)
        stack.callback(env.close)
        store = _open_store(settings.log_dir)
        if store is not None:
            stack.callback(store.close)
        for episode in range(settings.episodes):
            # a failsafe that ended the last episode stays latched; a watchdog hold in our own pause between them
            # (storing, resetting) is acknowledged right before the next episode's first command
            resume = bool(summaries) and not summaries[-1]["failsafe"]
            summary = {**_run_episode(env, adapter, policy, settings, episode, store, resume), "unmeasured": unmeasured}
            summaries.append(summary)
            rejected, steps = summary["commands_rejected"], summary["steps"]
            if _rejected_wholesale(rejected, steps, settings):
                where = f"; the episode is logged in {settings.log_dir}" if store is not None else ""
                raise DeployError(f"episode {episode}: the safety layer rejected {rejected} of {steps} commands "
                                  f"(violations: {summary['violations']}), so the robot did not follow the policy; "
                                  f"check the robot's limits (robot.safety.*) and mode against the policy{where}",
                                  summaries)  # fmt: skip
    return summaries


def _rejected_wholesale(rejected: int, steps: int, settings: DeploySettings) -> bool:
    """More than `max_rejected_fraction` of an episode's commands rejected: the robot did not follow the policy."""
    return rejected > settings.max_rejected_fraction * steps


def _open_store(log_dir: Path | None):
    if log_dir is None:
        return None
    from embodied.data.store import EpisodeStore

    Path(log_dir).mkdir(parents=True, exist_ok=True)
    return EpisodeStore(Path(log_dir) / "episodes.zarr", mode="a")


@torch.no_grad()
def _run_episode(env, adapter: TwinAdapter, policy, settings: DeploySettings, episode: int, store,
                 resume: bool = False) -> dict[str, float]:  # fmt: skip
    obs, _ = env.reset(seed=settings.seed + episode)  # each episode its own draw of what the twin simulates
    rows: dict[str, list] = {}
    errors: list[float] = []
    rejected: list[bool] = []  # per command: the safety layer passed nothing (latched, stale, shape, no valid clip)
    status = _Status(settings.status, env, episode)
    pending: list[dict] = []  # the step to log once its command is out (logging stays off the command path)

    def log_step() -> None:
        row = pending.pop()
        sent = env.last_sent
        row["sent"] = np.full(env.robot.action_spec.shape, np.nan) if sent is None else sent
        rejected.append(sent is None)
        row["waypoint"] = adapter.waypoint
        _append(rows, row)
        error = adapter.position_error(row["robot_obs"])
        if error is not None:
            errors.append(error)
        status.update(len(rows["time"]) - 1, error, adapter)

    env.after_send = log_step
    for step in range(settings.steps):
        action = policy.act(obs, deterministic=True).action
        robot_obs = env.robot_obs
        pending.append({"time": robot_obs["timestamp"], f"{keys.OBS}/{keys.STATE}": obs[keys.STATE][0].numpy(),
                        keys.ACTION: action[0].numpy(), "robot_obs": robot_obs})  # fmt: skip
        if step == 0 and resume:
            env.robot.resume()
        obs, _, terminated, truncated, info = env.step(action)
        if bool(terminated[0]) or bool(truncated[0]):
            break
    failsafe = env.robot.failsafe_reason or ""  # now: once commands stop, the watchdog will hold the robot
    violations = dict(env.robot.safety.counts)
    env.after_send = None
    status.close()
    summary = {"episode": episode, "steps": step + 1, **env.timing(), "failsafe": failsafe,
               "violations": violations, "commands_rejected": sum(rejected)}  # fmt: skip
    # with its commands rejected the robot holds still (or lands): its position error is no tracking figure
    if errors and not _rejected_wholesale(sum(rejected), step + 1, settings):
        tail = errors[len(errors) // 2 :]  # the settled half of the flight
        summary.update(position_error_final=errors[-1], position_error_mean_settled=float(np.mean(tail)),
                       waypoints_reached=int(rows["waypoint"][-1]) + (errors[-1] < settings.reach_radius))  # fmt: skip
    if store is not None:
        robot_keys = list(env.robot.observation_spec)
        for r in rows.pop("robot_obs"):
            _append(rows, {f"robot/{k}": np.asarray(r[k], np.float32) for k in robot_keys})
        store.append_episode({k: np.stack(v) for k, v in rows.items()})
    return summary


def _append(rows: dict[str, list], row: dict[str, Any]) -> None:
    for k, v in row.items():
        rows.setdefault(k, []).append(v if k == "robot_obs" else np.asarray(v))


class _Status:
    """A live one-line status (rich), refreshed at 4 Hz so it does not disturb the control loop."""

    def __init__(self, enabled: bool, env, episode: int):
        self.env, self.episode, self.live, self.next = env, episode, None, 0.0
        if enabled:
            from rich.live import Live

            self.live = Live("", refresh_per_second=4, transient=False)
            self.live.start()

    def update(self, step: int, error: float | None, adapter: TwinAdapter) -> None:
        now = time.monotonic()
        if self.live is None or now < self.next:
            return
        self.next = now + 0.25
        t = self.env.timing()
        robot = self.env.robot
        text = (f"episode {self.episode} step {step}  {t.get('achieved_hz', 0):.1f} Hz  "
                f"jitter p99 {t.get('jitter_p99_ms', 0):.2f} ms  latency p50 {t.get('latency_p50_ms', 0):.2f} ms")  # fmt: skip
        if error is not None:
            text += f"  position error {error:.3f} m  waypoint {adapter.waypoint}"
        text += f"  violations {sum(robot.safety.counts.values())}" + (f"  FAILSAFE: {robot.failsafe_reason}" if robot.failsafe_reason else "")
        self.live.update(text)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()


def export(path: Path, out_dir: Path) -> dict[str, Path | str]:
    """TorchScript, ONNX and C files of the policy at `path` (an MLP policy) -> {kind: the file written}; an image
    policy gets no C file (the C export is state-only), its entry says so instead."""
    from real_robot.export import Controller, export_c, export_onnx, export_torchscript

    ckpt = checkpoint.find_checkpoint(path)
    config = checkpoint.load_config(ckpt)
    env = registry.build("env", config["env"]["name"], {k: v for k, v in config["env"].items() if k != "name"}, num_envs=1)
    policy = make_policy(config, env)
    policy.load_state_dict(checkpoint.load_model(ckpt, env.device))
    controller = Controller.from_policy(policy, env.observation_spec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path | str] = {"torchscript": export_torchscript(controller, out_dir / "policy.pt"),
                                    "onnx": export_onnx(controller, out_dir / "policy.onnx")}  # fmt: skip
    if controller.cameras:
        files["c"] = (f"skipped: the C export is state-only and this policy reads cameras "
                      f"({', '.join(controller.cameras)}); run policy.pt or policy.onnx")
    else:
        files["c"] = export_c(controller, out_dir / "policy.c")
    return files
