"""The live bar over the stages that count updates (BC, offline RL)."""

import sys

from embodied.runner.logger import update_progress


def _rendered(capsys, monkeypatch, total: int, done: int, steps: int, show: bool = True) -> str:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # as on a terminal
    with update_progress("bc", total, done, show) as advance:
        for _ in range(steps):
            advance()
    return capsys.readouterr().out


def test_the_bar_counts_each_update(capsys, monkeypatch):
    assert "5/5 updates" in _rendered(capsys, monkeypatch, total=5, done=0, steps=5)
    assert "2/5 updates" in _rendered(capsys, monkeypatch, total=5, done=0, steps=2)


def test_a_resumed_stage_starts_where_it_left_off(capsys, monkeypatch):
    assert "5/5 updates" in _rendered(capsys, monkeypatch, total=5, done=3, steps=2)


def test_no_bar_when_switched_off(capsys, monkeypatch):
    assert "updates" not in _rendered(capsys, monkeypatch, total=5, done=0, steps=5, show=False)
