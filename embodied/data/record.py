"""`embodied record`: episodes from a scripted expert, a trained policy or a teleop device, written to an episode
store that `data=` trains from and `embodied data export` turns into a LeRobot dataset.

    summary = record(env, "demos.zarr", episodes=100, seed=0)      # the env's scripted expert (env.expert_action)
    summary = record(env, "runs.zarr", episodes=100, seed=0, policy=policy)
    summary = record_teleop(env, device, "teleop.zarr", episodes=10, seed=0, simulator=True)

`record`: each env of the batched `env` runs one episode per round (`collect_episodes`, the one collector: a pipeline's scripted demonstrations too), so rounds
of `env.num_envs` episodes are appended until `episodes` are in, each as one committed store episode with
`obs/<key>` (language and camera frames when the env has them), `action`, `reward`, `terminated`, `truncated`
and `success` (the env's success at that step, as LeRobot's `next.success`).

`record_teleop`: a device (`real_robot/teleop`: keyboard, gamepad, spacemouse, or the scripted one) drives a
one-env `env` (a sim, or a robot as a `RobotEnv` whose commands pass its safety layer) at every step; while a
person's device is not in control the action is zero (hold still). The operator's keys label an episode as a
correction session's do (`embodied.hil.session`): success (`y`) ends it with reward 1, failure (`n`) with
reward 0, both terminated; `q` ends the recording after storing the episode. The rewind key does nothing here.
Rows add `next_obs/<key>`, `is_intervention` (the device was in control) and `label` (1 success, 0 failure,
-1 none; unlabelled sim episodes take the sim's own outcome, a robot's stay -1), so `embodied classifier` trains on
the store as on a session's.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from embodied import keys, registry
from embodied.data.lerobot_format import progress_bar
from embodied.data.store import EpisodeStore
from embodied.envs import VecEnv
from embodied.keys import FAILURE_LABEL, NO_LABEL, SUCCESS_LABEL

LIVE = "live"  # bool [T, N]: the step belongs to the env's first episode


@torch.no_grad()
def collect_episodes(env: VecEnv, seed: int, policy=None, action_noise: float = 0.0,
                     generator: torch.Generator | None = None) -> TensorDict:
    """One episode per env from env.reset(seed), the env's scripted expert acting (or `policy`'s deterministic
    action), plus Gaussian noise of std `action_noise` clipped to the action bounds (suboptimal demonstrations):
    TensorDict [T, N] with obs, action (as executed), reward, done, terminated, truncated, live (True up to and
    including each env's first done step) and success [T, N] (the env's success at that step, as a correction
    session stores it and LeRobot's `next.success` means it: an episode succeeded when any of its rows did)."""
    if policy is None and not hasattr(env, "expert_action"):
        raise ValueError(f"{type(env).__name__} has no scripted expert (an `expert_action` method): record with a "
                         "policy or a teleop device instead")
    obs, _ = env.reset(seed=seed)
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    steps = []
    for _ in range(env.max_episode_steps):
        action = env.expert_action() if policy is None else policy.act(obs, deterministic=True).action
        if action_noise:
            noise = torch.randn(action.shape, generator=generator).to(action.device)
            action = (action + action_noise * noise).clamp(env.action_spec.low, env.action_spec.high)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        success = info.get(keys.SUCCESS, torch.zeros_like(done)).bool() & live
        steps.append(TensorDict({keys.OBS: obs, keys.ACTION: action, keys.REWARD: reward, keys.DONE: done,
                                 keys.TERMINATED: terminated, keys.TRUNCATED: truncated, keys.SUCCESS: success,
                                 LIVE: live.clone()}, batch_size=[n]))  # fmt: skip
        live &= ~done
        obs = next_obs
        if not live.any():
            break
    return torch.stack(steps)


def record(env, store_path: str | Path, episodes: int, seed: int, policy=None, progress: bool = False,
           action_noise: float = 0.0, generator=None) -> dict:
    """Append `episodes` episodes to the store at `store_path` (created if absent); returns what was written."""
    written, frames, successes = 0, 0, 0
    rounds = (episodes + env.num_envs - 1) // env.num_envs
    with EpisodeStore(store_path, mode="a") as store:
        for round_ in progress_bar(range(rounds), rounds, "record", progress):
            batch = collect_episodes(env, seed + round_, policy, action_noise, generator).to("cpu")  # [T, N]
            for i in range(min(env.num_envs, episodes - written)):
                rows = batch[:, i][batch[LIVE][:, i]]
                flat = rows.exclude(LIVE, keys.DONE).flatten_keys("/")
                store.append_episode({k: flat[k].numpy() for k in flat.keys()})
                written, frames, successes = written + 1, frames + rows.numel(), successes + bool(rows[keys.SUCCESS].any())
        total = store.num_episodes
    return {"episodes": written, "frames": frames, "success": successes / max(written, 1), "store_episodes": total}


def record_from_device(env_config: dict[str, Any], teleop: str, teleop_params: dict[str, Any], store_path: str | Path,
                       episodes: int, seed: int, robot: str | None = None, robot_params: dict[str, Any] | None = None,
                       steps: int | None = None, hz: float | None = None, device: str = "cpu",
                       progress: bool = False) -> dict:
    """`embodied record --teleop`: build the env (`env_config`, one instance) or, with `robot`, the robot with that env
    as its observation model (as `embodied correct` does: the fit is checked first, every command passes the safety
    layer), connect the device and record; returns what was written."""
    from embodied.hil.session import SessionSettings, build_env
    from embodied.build import make_env

    with ExitStack() as stack:
        if robot is None:
            env = make_env({"env": env_config}, 1, torch.device(device))
        else:
            settings = SessionSettings(robot=robot, robot_params=robot_params or {}, steps=steps or 300, control_hz=hz)
            env, _rewinder = build_env(settings, {"env": env_config}, stack)
        name, teleop_device = connect_teleop(teleop, teleop_params, env, env_config["name"])
        stack.callback(teleop_device.disconnect)
        simulator = not _is_robot(env)
        if simulator and hz is None and name != "scripted":  # a person needs the sim at its real rate
            dt = getattr(env.config, "dt", None) or getattr(env.config, "control_dt", None)
            hz = 1.0 / dt if dt else 20.0
        summary = record_teleop(env, teleop_device, store_path, episodes, seed, simulator,
                                hz if simulator else None, progress)  # a RobotEnv keeps its own rate
    return {"teleop": name, **summary}


def connect_teleop(name: str, overrides: dict[str, Any], env, env_name: str):
    """(registry name, connected device) for the configs/teleop/ preset or registry name `name` driving `env`'s action.
    `scripted` is the env's scripted expert, in control from the first step to the last (on a robot it reads the
    twin, the robot's observation model). A device library that is missing is one error naming device and fix."""
    from embodied.hil.session import load_teleop
    from embodied.registry import MissingExtraError

    name, params = load_teleop(name, overrides, env.action_spec.shape[-1])
    if name == "scripted":
        sim = env.adapter.env if _is_robot(env) else env
        if not hasattr(sim, "expert_action"):
            raise KeyError(f"teleop=scripted: env {env_name!r} has no scripted expert (an `expert_action` method)")
        # one takeover at the first step lasting the whole episode: the operator drives every step
        always = torch.ones(1, dtype=torch.bool)
        device = registry.build("teleop", "scripted", {**params, "min_steps": env.max_episode_steps, "max_per_episode": 1},
                                expert=lambda obs: sim.expert_action(), rule=lambda obs: always)  # fmt: skip
    else:
        device = registry.build("teleop", name, params)
    try:
        device.connect()
    except MissingExtraError as err:
        raise MissingExtraError(f"teleop={name}: {err}") from None
    return name, device


def record_teleop(env, device, store_path: str | Path, episodes: int, seed: int, simulator: bool,
                  hz: float | None = None, progress: bool = False) -> dict:
    """Append up to `episodes` episodes driven by the connected `device` in the one-env `env` (module doc); `simulator`:
    the env's success labels unlabelled episodes; `hz`: steps per second at most (None: as fast as it steps)."""
    if env.num_envs != 1:
        raise ValueError(f"a teleop device drives one env; this env has num_envs={env.num_envs}")
    written, frames, labels, human = 0, 0, [], 0
    with EpisodeStore(store_path, mode="a") as store:
        for episode in progress_bar(range(episodes), episodes, "record", progress):
            obs, _ = env.reset(seed=seed + episode)
            device.episode_start()
            if not simulator:  # the watchdog held the robot while the last episode was stored: acknowledge it
                env.robot.resume()
            rows, label, quit_ = _teleop_episode(env, device, obs, hz)
            if label == NO_LABEL and simulator:
                label = SUCCESS_LABEL if bool(rows[-1][keys.SUCCESS][0]) else FAILURE_LABEL
            batch = torch.cat(rows).to("cpu")
            flat = {k: v.numpy() for k, v in batch.flatten_keys("/").items()}
            store.append_episode({**flat, "label": np.full(len(batch), label, np.int8)})
            written, frames, human = written + 1, frames + len(batch), human + int(batch[keys.IS_INTERVENTION].sum())
            labels.append(label)
            if quit_:
                break
        total = store.num_episodes
    return {"episodes": written, "frames": frames, "success": labels.count(SUCCESS_LABEL) / max(written, 1),
            "unlabelled": labels.count(NO_LABEL), "intervention_share": human / max(frames, 1), "store_episodes": total}


def _teleop_episode(env, device, obs: TensorDict, hz: float | None) -> tuple[list[TensorDict], int, bool]:
    """(rows [1] of one episode, the operator's label or NO_LABEL, whether the operator quit)."""
    from embodied.keys import FAILURE_EVENT as FAILURE
    from embodied.keys import QUIT
    from embodied.keys import SUCCESS_EVENT as SUCCESS

    rows, label, quit_ = [], NO_LABEL, False
    period, tick = (1.0 / hz if hz else 0.0), time.monotonic()
    for _ in range(env.max_episode_steps):
        action, active, events = device.command(obs, 1)
        next_obs, reward, terminated, truncated, info = env.step(action.to(env.device))
        done = terminated | truncated
        if SUCCESS in events or FAILURE in events:  # HIL-SERL's sparse reward from the operator, as a session
            label = SUCCESS_LABEL if SUCCESS in events else FAILURE_LABEL
            reward = torch.full_like(reward, float(label == SUCCESS_LABEL))
            terminated = torch.ones_like(terminated)
        success = info.get(keys.SUCCESS, torch.zeros_like(done)).bool()
        rows.append(TensorDict({keys.OBS: obs, keys.NEXT_OBS: info["final_obs"] if bool(done[0]) else next_obs,
                                keys.ACTION: action.to(env.device), keys.REWARD: reward, keys.TERMINATED: terminated,
                                keys.TRUNCATED: truncated, keys.SUCCESS: success,
                                keys.IS_INTERVENTION: active.to(env.device)}, batch_size=[1]))  # fmt: skip
        obs, quit_ = next_obs, QUIT in events
        if quit_ or label != NO_LABEL or bool(done[0]):
            break
        if period:  # pace a sim for the person driving it; deadlines from the last one, never bursting to catch up
            tick = max(tick + period, time.monotonic())
            time.sleep(max(0.0, tick - time.monotonic()))
    return rows, label, quit_


def _is_robot(env) -> bool:
    """A robot as a VecEnv (real_robot/robot_env.py: it holds the `robot` and the twin `adapter`), not a simulator."""
    return hasattr(env, "robot") and hasattr(env, "adapter")
