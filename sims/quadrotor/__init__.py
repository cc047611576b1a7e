"""Torch-batched Crazyflie 2.x quadrotor simulator with hover and waypoint tasks."""

from sims.quadrotor.env import HoverConfig, QuadrotorHoverEnv
from sims.quadrotor.waypoint import QuadrotorWaypointEnv, WaypointConfig

__all__ = ["HoverConfig", "QuadrotorHoverEnv", "QuadrotorWaypointEnv", "WaypointConfig"]
