"""Simulated hardware: vehicles speaking MAVLink and CRTP, built on the registered sims (no `sims` import), and
LeRobot arms (a fake LeRobot 0.6.1 for environments without it; fake motor buses under its real classes)."""
