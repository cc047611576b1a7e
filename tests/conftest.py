"""Markers: `slow` runs only with --runslow; `gpu` only where CUDA is present; `hardware` only with --hardware."""

import os
import subprocess
import sys
from pathlib import Path

# MuJoCo picks its GL backend when first imported, whichever test imports it first: offscreen EGL
# (Mesa's software renderer on CPU machines; shared/ENVIRONMENT.md)
os.environ.setdefault("MUJOCO_GL", "egl")

import pytest  # noqa: E402
import torch  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", help="also run slow learning tests")
    parser.addoption("--hardware", action="store_true", help="also run tests that need real robot hardware")


def pytest_configure(config):
    torch.set_num_threads(1)  # small nets are dispatch-bound; one thread is the fast and deterministic choice


# files whose tests start Ray worker processes: first, so that under `pytest -n 2` (scripts/test.sh) the other worker
# runs the rest beside them. On a busy 2-core machine a worker's start-up took 1.5-3 min and these files ran last,
# alone, for most of a 26-minute suite.
FIRST = ("test_distributed.py", "test_distributed_cluster.py", "test_sweep.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in FIRST)  # stable: the order is otherwise the collection's
    reasons = {
        "slow": None if config.getoption("--runslow") else "slow test (learning runs, long crash loops): pass --runslow",
        "gpu": None if torch.cuda.is_available() else "needs a CUDA device; none is present",
        "hardware": None if config.getoption("--hardware") else "needs real hardware: pass --hardware",
    }
    for item in items:
        for marker, reason in reasons.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def cli_fails(tmp_path, monkeypatch, capsys):
    """`embodied ARGS` run in this process from tmp_path (a subprocess costs ~5 s of imports) where it must exit:
    `cli_fails(*args)` returns (exit code, stdout, stderr)."""
    from embodied.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "argv", ["embodied", *args])
        with pytest.raises(SystemExit) as exit_:
            main()
        captured = capsys.readouterr()
        return exit_.value.code, captured.out, captured.err

    return run


@pytest.fixture(scope="session")
def lerobot_python() -> str:
    """The interpreter of the separate LeRobot environment, built on first use by scripts/lerobot_env.sh (~3.5 min,
    ~5.4 GB, kept in .lerobot-env/ or $LEROBOT_ENV); skips where Python 3.12 is missing (the script exits 2)."""
    repo = Path(__file__).resolve().parents[1]
    env = Path(os.environ.get("LEROBOT_ENV", repo / ".lerobot-env"))
    build = subprocess.run(["bash", str(repo / "scripts" / "lerobot_env.sh")], capture_output=True, text=True,
                           timeout=1800, env={**os.environ, "LEROBOT_ENV": str(env)})  # fmt: skip
    if build.returncode == 2:
        pytest.skip(f"no LeRobot environment: {build.stderr.strip()}")
    assert build.returncode == 0, build.stderr[-3000:]
    return str(env / "bin" / "python")
