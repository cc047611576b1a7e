"""Runner: builds env, policy and algorithm from a config and runs the training loop."""
