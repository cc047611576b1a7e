"""`embodied correct` end to end: a keyboard session in a pseudo-terminal, a scripted session in the sim."""

import json
import os
import pty
import re
import select
import sys
import time

import numpy as np
import pytest
import torch

from embodied import keys
from embodied.data.store import EpisodeStore


def _read(fd: int, out: bytearray, done, timeout: float) -> bool:
    """Append what the terminal prints to `out` until `done()` holds (True) or `timeout` s pass or it closes."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
    return done()


def _read_until(fd: int, needle: bytes, out: bytearray, timeout: float) -> bool:
    return _read(fd, out, lambda: needle in out, timeout)


_STATUS = re.compile(rb"episode (\d+) step (\d+)  intervention (\d+)%  rewinds (\d+)")


def _wait_status(fd: int, out: bytearray, until, timeout: float = 60) -> tuple[int, int, int, int]:
    """Read the session's live status line until `until(episode, step, intervention %, rewinds)` holds for the newest
    one: the test presses keys when the loop shows it has acted, not after a sleep (a loaded host stalls it)."""
    def newest():
        lines = _STATUS.findall(bytes(out))
        return tuple(map(int, lines[-1])) if lines else None

    if not _read(fd, out, lambda: newest() is not None and until(*newest()), timeout):
        raise AssertionError(f"the status line never showed the awaited state:\n{out.decode(errors='replace')}")
    return newest()


def test_keyboard_session_in_a_pseudo_terminal(ckpt, tmp_path):
    store = tmp_path / "session"
    # the watchdog at its longest (20 periods, 2 s): a busy CI host stalls the loop past the default 175 ms, and the
    # hold would end an episode before its key; teleop.hold_s keeps the axis pressed without the terminal's repeats
    argv = ["embodied", "correct", str(ckpt), "robot=sim_arm", "robot.control_hz=10", "robot.physics_hz=20",
            "robot.safety.watchdog_periods=20", "teleop=keyboard", "teleop.hold_s=60", "--hz", "10",
            "--episodes", "2", "--steps", "200", "--rewind-steps", "3", "--store", str(store)]  # fmt: skip
    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI in a real terminal (forked, so it skips the interpreter start-up)
        code = 1
        try:
            from embodied.cli import main

            # pytest captured the standard streams; the child talks to its terminal, fds 0-2
            sys.stdin = os.fdopen(0, "r", closefd=False)
            sys.stdout = os.fdopen(1, "w", closefd=False)
            sys.stderr = os.fdopen(2, "w", closefd=False)
            sys.argv = argv
            main()
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            os._exit(code)
    out = bytearray()
    try:
        _wait_status(fd, out, lambda ep, step, human, rewinds: ep == 0)
        os.write(fd, b"a")  # joint 0 plus: takes over
        _, took, _, _ = _wait_status(fd, out, lambda ep, step, human, rewinds: human > 0)
        _wait_status(fd, out, lambda ep, step, human, rewinds: step >= took + 3)  # 4+ operator steps
        os.write(fd, b"b")  # rewind 3 steps (the arm drives back through the safety layer) ...
        _, rewound, _, _ = _wait_status(fd, out, lambda ep, step, human, rewinds: rewinds == 1)
        os.write(fd, b"a")  # ... and correct from there
        _wait_status(fd, out, lambda ep, step, human, rewinds: step >= rewound + 2)
        os.write(fd, b" ")  # let go
        shown = _wait_status(fd, out, lambda ep, step, human, rewinds: True)[1]
        _wait_status(fd, out, lambda ep, step, human, rewinds: step >= shown + 2)
        os.write(fd, b"y")  # success: ends episode 0
        _wait_status(fd, out, lambda ep, step, human, rewinds: ep == 1)
        os.write(fd, b"n")  # failure: ends episode 1 and the session
        _read_until(fd, b"episodes written to", out, 30)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, out.decode(errors="replace")
    reader = EpisodeStore(store / "episodes.zarr")
    assert reader.num_episodes == 2
    first, second = reader.episode(0), reader.episode(1)
    log = out.decode(errors="replace")
    assert '"ended": "success key"' in log and '"ended": "failure key"' in log, log
    assert first["label"].unique().tolist() == [1] and second["label"].unique().tolist() == [0]
    human = first[keys.IS_INTERVENTION]
    assert human.dtype == torch.bool and 2 <= int(human.sum()) < len(human)
    # while the operator held the key, the executed action is the keyboard's, not the policy's
    assert bool((first[keys.ACTION][human][:, 0] == 1.0).any())
    assert not torch.equal(first[keys.ACTION][human], first["policy_action"][human])
    assert not bool(second[keys.IS_INTERVENTION].any())
    assert 1 <= int(first["rewound"].sum()) <= 3  # the abandoned rows are kept, marked
    correction = first["correction"]
    assert bool(correction.any()) and bool(human[correction].all())  # operator rows after the rewind
    assert float(first[keys.REWARD][-1]) == 1.0 and bool(first[keys.TERMINATED][-1])
    assert float(second[keys.REWARD][-1]) == 0.0 and bool(second[keys.TERMINATED][-1])


def test_scripted_session_in_the_sim_records_intervention_flags(ckpt, tmp_path):
    from embodied.cli import correct_cmd

    store = tmp_path / "scripted"
    code = correct_cmd([str(ckpt), "robot=sim", "teleop=scripted", "--episodes", "2", "--steps", "60",
                        "--store", str(store), "--no-status"])  # fmt: skip
    assert code == 0
    reader = EpisodeStore(store / "episodes.zarr")
    assert reader.num_episodes == 2
    flags = np.concatenate([reader.episode(i)[keys.IS_INTERVENTION].numpy() for i in range(2)])
    assert 0 < flags.mean() < 1
    assert "rewound" in reader.keys and "correction" in reader.keys


def test_bad_overrides_name_the_valid_ones(ckpt, capsys):
    from embodied.cli import correct_cmd

    assert correct_cmd([str(ckpt), "robt=sim"]) == 1
    assert "valid: robot=<name>" in capsys.readouterr().err
    assert correct_cmd([str(ckpt), "robot=sim", "teleop=joystick", "--no-status"]) == 1
    assert "valid choices: gamepad, keyboard, koch_leader, scripted, so100_leader, so101_leader, spacemouse" in \
        capsys.readouterr().err


def test_lost_learner_holds_the_arm(ckpt, tmp_path):
    """No learner answers at the address: with on_learner_lost=hold the actor commands zero motion."""
    import socket

    from embodied.cli import correct_cmd

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    leader, follower = pty.openpty()
    try:
        code = correct_cmd([str(ckpt), "robot=sim_arm", "robot.control_hz=10", "robot.physics_hz=20",
                            f"teleop.fd={follower}", "--hz", "10", "--steps", "12", "--no-status",
                            "--learner", f"tcp://127.0.0.1:{port}", "--insecure", "--on-learner-lost", "hold",
                            "--store", str(tmp_path / "hold")])  # fmt: skip
    finally:
        os.close(leader)
        os.close(follower)
    assert code == 0
    episode = EpisodeStore(tmp_path / "hold" / "episodes.zarr").episode(0)
    assert torch.all(episode[keys.ACTION] == 0)  # held still the whole time
    qpos = episode[keys.OBS][keys.STATE][:, :4]
    assert float((qpos - qpos[0]).abs().max()) < 1e-3


def test_an_episode_the_failsafe_ends_says_so(ckpt, tmp_path, capsys):
    """A watchdog shorter than the control period holds the arm during the first step's wait: the episode ends there,
    unlabelled, and the summary names the failsafe (an operator otherwise sees a short episode and no reason)."""
    from embodied.cli import correct_cmd

    leader, follower = pty.openpty()
    try:
        code = correct_cmd([str(ckpt), "robot=sim_arm", "robot.control_hz=10", "robot.physics_hz=20",
                            "robot.safety.watchdog_periods=0.05", f"teleop.fd={follower}", "--hz", "10",
                            "--steps", "20", "--no-status", "--store", str(tmp_path / "held")])  # fmt: skip
    finally:
        os.close(leader)
        os.close(follower)
    assert code == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[0])
    assert summary["steps"] == 1 and summary["label"] == -1, summary
    assert summary["ended"].startswith("failsafe (watchdog): no command for "), summary


def test_a_watchdog_hold_between_episodes_does_not_end_the_next_one(ckpt, tmp_path, monkeypatch, capsys):
    """Between episodes the loop sends nothing (storing, resetting), and the watchdog holds the arm once that lasts
    longer than its timeout. Here the watchdog waits 20 control periods (2 s), so a loaded host's stall inside an
    episode does not trip it (CI saw 477 ms, then 1058 ms, likely beside a test compiling with inductor); the reset
    takes 25: the next episode must still run its steps, not end on its first one."""
    from embodied.cli import correct_cmd
    from real_robot.robot_env import RobotEnv

    reset = RobotEnv.reset

    def slow_reset(self, seed=None):
        obs = reset(self, seed)
        time.sleep(25 / 10)  # a slow reset, 25 periods at 10 Hz: longer than the watchdog's 20
        return obs

    monkeypatch.setattr(RobotEnv, "reset", slow_reset)
    leader, follower = pty.openpty()  # a keyboard nobody presses: the policy drives
    try:
        code = correct_cmd([str(ckpt), "robot=sim_arm", "robot.control_hz=10", "robot.physics_hz=20",
                            "robot.safety.watchdog_periods=20", f"teleop.fd={follower}", "--hz", "10",
                            "--episodes", "3", "--steps", "4", "--no-status",
                            "--store", str(tmp_path / "pause")])  # fmt: skip
    finally:
        os.close(leader)
        os.close(follower)
    assert code == 0
    reader = EpisodeStore(tmp_path / "pause" / "episodes.zarr")
    assert reader.num_episodes == 3
    for i in range(3):
        episode = reader.episode(i)
        assert len(episode[keys.ACTION]) == 4 and not bool(episode[keys.TERMINATED].any()), i
    summaries = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [s["ended"] for s in summaries] == ["step limit"] * 3


def test_rewound_rows_never_reach_the_learner(tmp_path):
    """A rewind abandons the last steps of the path; those rows are stored (flagged `rewound`) but must never be
    trained on as the policy's behaviour, even though the learner streams rows live. Rewinds at steps 6, 8 and 13 with
    rewind_steps=3: 3 rows, then 2 (only two steps since the first rewind's restore point), then 3."""
    from embodied import registry
    from embodied.hil.intervention import InterventionActor
    from embodied.hil.rewind import SnapshotRewinder
    from embodied.hil.session import SessionSettings, _Learning, _run_episode, _Status

    class Presses:  # the keyboard's `b` at given steps, the policy acting otherwise
        def __init__(self, at):
            self.at, self.t = at, 0

        def command(self, obs, num_envs=1):
            self.t += 1
            return torch.zeros(num_envs, 4), torch.zeros(num_envs, dtype=torch.bool), ["rewind"] * (self.t in self.at)

        def episode_start(self, mask=None):
            pass

    class Sink(_Learning):  # the learner's inlet as `_run_episode` feeds it, recorded
        def __init__(self):
            self.added, self.learner, self.link, self.policy = [], None, None, policy

        def add(self, row):
            self.added.append(row[keys.OBS][keys.STATE][0].clone())

    env = registry.build("env", "arm_reach", {}, num_envs=1)
    policy = registry.build("policy", "mlp", {}, observation_spec=env.observation_spec, action_spec=env.action_spec)
    settings = SessionSettings(steps=20, rewind_steps=3)
    actor, sink = InterventionActor(env, policy, Presses({6, 8, 13})), Sink()
    actor.reset(seed=0)
    with EpisodeStore(tmp_path / "episodes.zarr", mode="w") as store:
        summary, _ = _run_episode(actor, env, SnapshotRewinder(3), sink, store, settings, 0, _Status(False))
        episode = store.episode(0)
    assert summary["rewinds"] == 3
    rewound = episode["rewound"].bool()
    states = episode[keys.OBS][keys.STATE]
    assert int(rewound.sum()) == 3 + 2 + 3 and len(sink.added) == len(states) - 8
    # exactly the rows left on the path reached the learner, once each and in order
    assert all(torch.equal(a, b) for a, b in zip(sink.added, states[~rewound], strict=True))


def test_a_correction_session_trains_the_next_policy_through_data(ckpt, tmp_path, cli_fails):
    """`embodied train ... data=<session store>`: the session's kept rows are the demonstrations of BC and offline RL
    and the offline share of online RLPD (no scripted expert regenerated); a store whose shapes do not fit the env,
    an empty store and data= on a run without stages each fail at start naming the problem."""
    import subprocess

    from embodied.cli import correct_cmd

    store = tmp_path / "session"
    assert correct_cmd([str(ckpt), "robot=sim", "teleop=scripted", "--episodes", "3", "--steps", "40",
                        "--store", str(store), "--no-status"]) == 0  # fmt: skip
    o2o = ["train", "experiment=arm_reach_o2o", "pipeline.demos.episodes=0", "pipeline.bc.updates=20",
           "pipeline.offline.updates=20", "train.total_env_steps=64", "train.eval_episodes=4",
           "pipeline.online.eval_episodes=4", "pipeline.online.eval_every=10000", "train.progress=false"]

    kept = sum(int((~EpisodeStore(store / "episodes.zarr").episode(i)["rewound"].bool()).sum()) for i in range(3))
    out = subprocess.run([sys.executable, "-m", "embodied.cli", *o2o, f"data={store}", f"hydra.run.dir={tmp_path}/run"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)  # as the user runs it
    assert out.returncode == 0, out.stderr
    assert f"data: {kept:,} transitions from {store}" in out.stdout
    assert (tmp_path / "run" / "bc" / "checkpoints" / "final" / "model.safetensors").exists()

    def fails(*args) -> str:  # the failures in this process
        code, _, err = cli_fails(*args)
        assert code == 1 and "Traceback" not in err, err
        return err

    with EpisodeStore(tmp_path / "wrong.zarr", mode="w") as wrong:  # a 3-joint arm's actions, not this env's 4
        wrong.append_episode({"obs/state": np.zeros((5, 26), np.float32), "obs/privileged": np.zeros((5, 10), np.float32),
                              "obs/language": np.zeros((5, 64), np.uint8), "action": np.zeros((5, 3), np.float32),
                              "reward": np.zeros(5, np.float32), "terminated": np.zeros(5, bool),
                              "truncated": np.zeros(5, bool)})  # fmt: skip
    err = fails(*o2o, f"data={tmp_path / 'wrong.zarr'}", f"hydra.run.dir={tmp_path}/bad")
    assert "'action' has shape (3,) per row, the env's spec (4,)" in err
    EpisodeStore(tmp_path / "empty.zarr", mode="w").close()
    assert "holds no episodes" in fails(*o2o, f"data={tmp_path / 'empty.zarr'}", f"hydra.run.dir={tmp_path}/empty")
    assert "feeds a pipeline's stages" in fails("train", "experiment=arm_reach", f"data={store}",
                                                 f"hydra.run.dir={tmp_path}/ppo")
