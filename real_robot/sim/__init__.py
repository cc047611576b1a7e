"""Simulated hardware: vehicles speaking MAVLink and CRTP, built on the registered sims (no `sims` import)."""
