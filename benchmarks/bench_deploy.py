"""Deploy loop timing at 100 Hz and 500 Hz on the CPU, and the exported C controller against torch.

    .venv/bin/python benchmarks/bench_deploy.py [--seconds 3] [--repeats 3] [--checkpoint RUN_DIR]

1. "deploy": the full deploy path (`real_robot.deploy`): MLP policy -> twin observation model -> safety layer
   -> MAVLink driver -> UDP -> the MAVLink vehicle simulator in its own process, at 100 and 500 Hz.
   "lean": the same robot stack (RobotEnv, safety layer, MAVLink, UDP, vehicle process) with an MLP on the raw
   telemetry and no twin. Peer, interleaved in the same process: a bare fixed-rate loop that only runs the same MLP
   (`time.sleep` to each deadline), i.e. what the machine's scheduler allows with no robot stack at all.
   Reported: achieved rate, tick jitter p50/p99, observation -> command latency p50/p99, missed ticks.
   The watchdog is lax here (10 periods) so that a stall is measured instead of ending the run.
2. The exported C controller (cc -O2) against the torch actor on 10,000 random observations: max
   absolute difference (must be <= 1e-5) and time per forward pass.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from embodied.cli import compose  # noqa: E402
from embodied.runner import checkpoint  # noqa: E402
from real_robot.deploy import DeploySettings, deploy  # noqa: E402
from embodied.build import make_env, make_policy  # noqa: E402
from real_robot.export import Controller, export_c  # noqa: E402


def make_checkpoint(directory: Path) -> Path:
    """A quadrotor_hover MLP whose actor outputs 0 (exact hover), with a non-trivial normalizer."""
    config = compose(["experiment=quadrotor_hover", "device=cpu"])
    env = make_env(config, 1, torch.device("cpu"))
    policy = make_policy(config, env)
    policy.state_norm.update(torch.randn(4096, env.observation_spec["state"].shape[0]))
    torch.nn.init.zeros_(policy.actor[-1].weight)
    torch.nn.init.zeros_(policy.actor[-1].bias)
    checkpoint.save_checkpoint(directory / "checkpoints" / "final", policy.state_dict(), {}, config)
    return directory


def bare_loop(controller: Controller, hz: float, seconds: float) -> dict[str, float]:
    period, obs = 1.0 / hz, torch.zeros(1, controller.mean.numel())
    t0 = time.monotonic()
    ticks, lat = [t0], []
    for k in range(1, int(seconds * hz) + 1):
        start = time.monotonic()
        with torch.no_grad():
            controller(obs)
        lat.append(time.monotonic() - start)
        deadline = t0 + k * period
        delay = deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        ticks.append(time.monotonic())
    dt = np.diff(ticks)
    jitter = np.abs(dt - period) * 1e3
    return {"achieved_hz": len(dt) / (ticks[-1] - ticks[0]), "jitter_p50_ms": float(np.percentile(jitter, 50)),
            "jitter_p99_ms": float(np.percentile(jitter, 99)), "latency_p50_ms": 1e3 * float(np.median(lat)),
            "latency_p99_ms": 1e3 * float(np.percentile(lat, 99)), "missed_ticks": int(np.sum(dt > 1.5 * period))}  # fmt: skip


def lean_loop(hz: float, seconds: float) -> dict[str, float]:
    """RobotEnv over the MAVLink driver (safety layer, UDP, vehicle process) with a 13-input MLP on the raw
    telemetry (the default adapter: position, velocity, quaternion, body rates): no twin observation model."""
    from real_robot.drones.mavlink import MavlinkDrone, MavlinkDroneConfig
    from real_robot.robot_env import RobotEnv, RobotEnvConfig
    from real_robot.safety import SafetyConfig
    from real_robot.sim.mavlink_vehicle import MavlinkVehicleConfig, MavlinkVehicleProcess

    mlp = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ELU(), torch.nn.Linear(64, 64), torch.nn.ELU(),
                              torch.nn.Linear(64, 4))  # fmt: skip
    torch.nn.init.zeros_(mlp[-1].weight)
    torch.nn.init.zeros_(mlp[-1].bias)
    with MavlinkVehicleProcess(MavlinkVehicleConfig()) as vehicle:
        drone = MavlinkDrone(MavlinkDroneConfig(url=f"udpout:127.0.0.1:{vehicle.port}", control_hz=hz,
                                                safety=SafetyConfig(watchdog_periods=10)))  # fmt: skip
        env = RobotEnv(drone, RobotEnvConfig(control_hz=hz, max_episode_steps=10**9))
        obs, _ = env.reset()
        with torch.no_grad():
            for _ in range(int(seconds * hz)):
                obs, *_ = env.step(mlp(obs["state"]))
        timing = env.timing()
        env.close()
    return timing


def deploy_loop(run: Path, hz: float, seconds: float) -> dict[str, float]:
    settings = DeploySettings(robot="mavlink_sitl", dry_run=True, steps=int(seconds * hz), control_hz=hz, status=False,
                              robot_params={"control_hz": hz, "safety": {"watchdog_periods": 10}})  # fmt: skip
    return deploy(run, settings)[0]


def c_check(controller: Controller, workdir: Path) -> dict[str, float]:
    src = export_c(controller, workdir / "policy.c")
    lib = workdir / "policy.so"
    subprocess.run(["cc", "-std=c99", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-lm"], check=True)
    forward = ctypes.CDLL(str(lib)).policy_forward
    # observations in the policy's operating range: within ~2 std of the training distribution (the normalizer's);
    # far outside it, float32 rounding grows with the activations (|diff| ~1.5e-5 at 100 std, measured)
    obs = (torch.randn(10_000, controller.mean.numel()) * 2 / controller.inv_std + controller.mean).float()
    with torch.no_grad():
        expected = controller(obs).numpy()
    out, rows = np.zeros(expected.shape, np.float32), obs.numpy().copy()
    start = time.perf_counter()
    for i in range(len(rows)):
        forward(rows[i].ctypes.data_as(ctypes.c_void_p), out[i].ctypes.data_as(ctypes.c_void_p))
    c_us = (time.perf_counter() - start) / len(rows) * 1e6
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(1000):
            controller(obs[i : i + 1])
    torch_us = (time.perf_counter() - start) / 1000 * 1e6
    return {"max_abs_diff": float(np.abs(out - expected).max()), "c_us_per_call": c_us, "torch_us_per_call": torch_us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--checkpoint", type=Path, default=None, help="a trained run (default: a zero-action MLP)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        run = args.checkpoint or make_checkpoint(Path(tmp))
        ckpt = checkpoint.find_checkpoint(run)
        config = checkpoint.load_config(ckpt)
        policy = make_policy(config, make_env(config, 1, torch.device("cpu")))
        policy.load_state_dict(checkpoint.load_model(ckpt))
        controller = Controller.from_policy(policy)
        results: dict[tuple[str, int], list[dict]] = {}
        for _ in range(args.repeats):  # interleaved: ours, then the bare peer, at each rate
            for hz in (100, 500):
                results.setdefault(("deploy", hz), []).append(deploy_loop(run, hz, args.seconds))
                results.setdefault(("lean", hz), []).append(lean_loop(hz, args.seconds))
                results.setdefault(("bare", hz), []).append(bare_loop(controller, hz, args.seconds))
        keys = ("achieved_hz", "jitter_p50_ms", "jitter_p99_ms", "latency_p50_ms", "latency_p99_ms", "missed_ticks")
        print(f"{'loop':8s} {'Hz':>4s} " + " ".join(f"{k:>15s}" for k in keys) + "   (median [min, max] of repeats)")
        for (name, hz), runs in sorted(results.items(), key=lambda x: (x[0][1], x[0][0])):
            cells = []
            for k in keys:
                v = [r[k] for r in runs]
                cells.append(f"{statistics.median(v):7.2f} [{min(v):.2f},{max(v):.2f}]")
            print(f"{name:8s} {hz:4d} " + " ".join(f"{c:>15s}" for c in cells))
        for hz in (100, 500):
            bare = statistics.median(r["jitter_p99_ms"] for r in results[("bare", hz)])
            for name in ("deploy", "lean"):
                ours = statistics.median(r["jitter_p99_ms"] for r in results[(name, hz)])
                print(f"{hz} Hz: jitter p99 {name} / bare loop = {ours / max(bare, 1e-9):.2f}x")
        c = c_check(controller, Path(tmp))
        print(f"C controller vs torch, 10,000 observations: max |diff| {c['max_abs_diff']:.2e} "
              f"({'OK' if c['max_abs_diff'] <= 1e-5 else 'FAIL'}: <= 1e-5); {c['c_us_per_call']:.1f} us per call in C "
              f"(ctypes call included), {c['torch_us_per_call']:.1f} us in torch")  # fmt: skip


if __name__ == "__main__":
    main()
