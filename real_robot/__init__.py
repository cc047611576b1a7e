"""Real-robot drivers, teleoperation and the safety layer (see the real-robot issue)."""
