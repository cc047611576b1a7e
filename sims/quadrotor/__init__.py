"""Torch-batched Crazyflie 2.x quadrotor simulator with hover and waypoint tasks."""

from sims.quadrotor.env import HoverConfig, QuadrotorHoverEnv, QuadrotorWaypointEnv, WaypointConfig

__all__ = ["HoverConfig", "QuadrotorHoverEnv", "QuadrotorWaypointEnv", "WaypointConfig"]
