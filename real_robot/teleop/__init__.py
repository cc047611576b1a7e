"""Teleoperation devices: keyboard, gamepad and SpaceMouse (hidapi), LeRobot leader arms, a scripted operator.

Built by name from `embodied.registry` (kind `teleop`); nothing here is imported eagerly.
"""
