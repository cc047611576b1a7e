"""Robot arms: a simulated arm (torch arm sim through the env registry) and LeRobot's SO-100/101 and Koch."""
