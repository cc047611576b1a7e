"""How late the watchdog fires: the time from its deadline (last command + watchdog_periods control periods) to the
failsafe call, at 50 Hz, on a quiet machine, beside two busy CPU loops (`python -c "while True: pass"` twice: on a
2-core machine every core taken), and with the control thread itself busy in Python (the GIL). Slow, and it records
rather than asserts a wall-clock bound: the p50/p99/max it prints are what SafetyConfig.watchdog_periods' comment
cites. It asserts only what load cannot break: every deadline fired, exactly once, and never before it passed.

    .venv/bin/python -m pytest tests/real_robot/test_watchdog_latency.py --runslow -s
"""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from real_robot.robot import hold_switch_interval
from real_robot.safety import SafetyConfig, Watchdog

HZ, FIRINGS = 50.0, 250


def fire_latencies(n: int, busy_control_thread: bool) -> np.ndarray:
    """Seconds from each deadline to its failsafe call, over n commands each followed by silence."""
    timeout = SafetyConfig().watchdog_periods / HZ
    last, fired, late = [None], threading.Event(), []

    def on_timeout(why: str) -> None:
        late.append(time.monotonic() - (last[0] + timeout))
        fired.set()

    watchdog = Watchdog(timeout, lambda: last[0], on_timeout)
    watchdog.start()
    try:
        for i in range(n):
            fired.clear()
            last[0] = time.monotonic()  # a command; then none
            if busy_control_thread:  # the control loop computing (a policy in Python) instead of sleeping
                end = time.monotonic() + 2.0
                while not fired.is_set() and time.monotonic() < end:
                    sum(range(1000))
            else:
                fired.wait(2.0)
            time.sleep(0.001 * (i % 7))  # the next command at another phase of the thread's idle wait
    finally:
        watchdog.stop()
    return np.array(late)


@pytest.mark.slow
@pytest.mark.parametrize("load", ["quiet", "2 busy loops", "busy control thread", "busy control thread, 5 ms GIL"])
def test_watchdog_fire_latency(load):
    """As with a robot connected (the GIL's switch interval at most 1 ms), and once at CPython's default (5 ms)."""
    busy = 2 if load == "2 busy loops" else 0
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    connected = "5 ms" not in load
    if connected:
        hold_switch_interval(True)
    try:
        time.sleep(0.5 if loops else 0)  # the loops running before the first deadline (not synchronisation)
        late = fire_latencies(FIRINGS, busy_control_thread=load.startswith("busy control thread"))
    finally:
        if connected:
            hold_switch_interval(False)
        for loop in loops:
            loop.kill()
            loop.wait()
    ms = late * 1e3
    print(f"\nwatchdog at {HZ:.0f} Hz, {load}: {len(ms)} firings, late by p50 {np.percentile(ms, 50):.2f} ms, "
          f"p99 {np.percentile(ms, 99):.2f} ms, max {ms.max():.2f} ms (2 periods leave {(2 - 1.75) / HZ * 1e3:.1f} ms)")
    assert len(late) == FIRINGS and np.all(late >= 0)  # each deadline fired, once, never early
