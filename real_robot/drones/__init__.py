"""Drones: a MAVLink (PX4-style) driver and a Crazyflie driver over cflib."""
