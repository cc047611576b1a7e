"""Helpers shared by the drone driver tests."""

import time

from real_robot.safety import SafetyConfig

SLACK = SafetyConfig(watchdog_periods=10)  # plumbing tests: shared CI machines stall threads for 100s of ms


def fly(drone, command, seconds):
    """Send `command` at the drone's control rate for `seconds`; return the last observation."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        obs = drone.get_observation()
        drone.send_action(command, stamp=obs["timestamp"])
        time.sleep(drone.period / 2)
    return drone.get_observation()
