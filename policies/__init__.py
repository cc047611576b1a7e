"""Models behind the `embodied.policy.Policy` contract (registered in `embodied.registry`)."""
