"""Interventions, the scripted operator, rewind-and-correct, the learner's buffers."""

import numpy as np
import pytest
import torch

from embodied import keys, registry
from embodied.hil.intervention import POLICY_ACTION, InterventionActor, split_interventions
from embodied.hil.learner import Learner, LearnerConfig
from embodied.runner.bc import bc_step
from embodied.hil.operators import DriftRule, scripted_operator
from embodied.hil.rewind import SnapshotRewinder, TrajectoryRewinder
from embodied.runner.offpolicy import UniformPolicy
from real_robot.teleop.scripted import ScriptedOperator, ScriptedOperatorConfig
from sims.arm_reach.kinematics import REACH


class ConstantPolicy(UniformPolicy):
    def __init__(self, value: float, dim: int = 4):
        super().__init__(value, value, (dim,), torch.device("cpu"))


def _arm(n=4, **params):
    return registry.build("env", "arm_reach", params, num_envs=n)


def test_operator_takes_over_where_rule_fires_and_actions_are_flagged():
    env = _arm(3)
    fires = torch.tensor([True, False, False])
    expert = torch.full((3, 4), -0.5)
    op = ScriptedOperator(ScriptedOperatorConfig(action_dim=4, min_steps=3, max_per_episode=1),
                          expert=lambda obs: expert, rule=lambda obs: fires)  # fmt: skip
    actor = InterventionActor(env, ConstantPolicy(0.25), op)
    actor.reset(seed=0)
    flags = []
    for _ in range(5):
        row, events = actor.step()
        flags.append(row[keys.IS_INTERVENTION].tolist())
        human = row[keys.IS_INTERVENTION]
        assert torch.all(row[keys.ACTION][human] == -0.5) and torch.all(row[keys.ACTION][~human] == 0.25)
        assert torch.all(row[POLICY_ACTION] == 0.25)
    # env 0: one takeover of min_steps=3, then max_per_episode=1 stops further ones
    assert [f[0] for f in flags] == [True, True, True, False, False]
    assert not any(f[1] or f[2] for f in flags)
    assert split_interventions(row).batch_size[0] == 0


def test_scripted_arm_reach_operator_rescues_a_bad_policy_and_logs_rates():
    env = _arm(8, max_episode_steps=60)
    actor = InterventionActor(env, ConstantPolicy(0.0), scripted_operator(env, {
        "action_dim": 4, "min_steps": 15, "max_per_episode": 4}))  # fmt: skip
    plain = InterventionActor(_arm(8, max_episode_steps=60), ConstantPolicy(0.0),
                              ScriptedOperator(ScriptedOperatorConfig(action_dim=4), lambda o: None,
                                               lambda o: torch.zeros(8, dtype=torch.bool)))  # fmt: skip
    actor.reset(seed=1)
    plain.reset(seed=1)
    for _ in range(120):
        actor.step()
        plain.step()
    stats, base = actor.pop_episode_stats(), plain.pop_episode_stats()
    assert base["success"] == 0.0 and base["intervention_rate"] == 0.0  # a policy that never moves
    assert stats["success"] > 0.5, stats  # the stall rule hands control to the expert
    assert 0.0 < stats["intervention_rate"] < 1.0 and stats["intervention_length"] >= 15


def test_scripted_mujoco_operators_rescue_a_still_policy():
    pytest.importorskip("sims.mujoco")  # sets MUJOCO_GL before mujoco loads
    for name, goal_in_state in (("mujoco_reach", True), ("mujoco_push", True), ("mujoco_reach", False)):
        env = registry.build("env", name, {"goal_in_state": goal_in_state}, num_envs=8)  # False: the goal in privileged
        dim = env.action_spec.shape[0]
        operator = scripted_operator(env, {"action_dim": dim, "min_steps": 15, "max_per_episode": 3})
        actor = InterventionActor(env, ConstantPolicy(0.0, dim), operator)
        actor.reset(seed=1)
        for _ in range(120):
            actor.step()
        stats = actor.pop_episode_stats()
        assert stats["success"] > 0.6 and 0.0 < stats["intervention_rate"] < 1.0, (name, stats)


def test_drift_rule():
    rule = DriftRule(_arm(2).task_progress)
    priv = torch.zeros(2, 10)
    priv[:, 3] = torch.tensor([0.20, 0.20]) / REACH
    assert not rule({"privileged": priv}).any()
    priv[:, 9] = 0.1
    priv[:, 3] = torch.tensor([0.10, 0.24]) / REACH  # env 1 drifted 4 cm away from its best
    assert rule({"privileged": priv}).tolist() == [False, True]


def test_snapshot_rewind_restores_the_state_exactly():
    env = _arm(1)
    obs0, _ = env.reset(seed=3)
    rewinder = SnapshotRewinder(horizon=5)
    rewinder.record(env)
    states = []
    for i in range(8):
        env.step(torch.full((1, 4), 0.3 * (-1) ** i))
        rewinder.record(env)
        states.append(env.get_state()["qpos"].clone())
    assert rewinder.available() == 5
    obs, segment = rewinder.rewind(env, 3)
    assert segment == [] and torch.equal(env.get_state()["qpos"], states[-4])
    obs_again, _ = rewinder.rewind(env, 10)  # clipped to what is left
    assert torch.equal(env.get_state()["qpos"], states[-6]) and obs_again["state"].shape == obs0["state"].shape


def test_trajectory_rewind_drives_back_through_the_safety_layer():
    from real_robot.robot_env import RobotEnv, RobotEnvConfig

    # the lazy physics catch-up costs ~ms per step on a loaded CPU; the watchdog at 20 periods (2 s), not 1.75: a host
    # stall of 184 ms during the rewind tripped the default in a quiet CI run (test_session's arms run at 20 too)
    robot = registry.build("robot", "sim_arm", {"control_hz": 10.0, "physics_hz": 20.0, "safety": {"watchdog_periods": 20}})
    env = RobotEnv(robot, RobotEnvConfig(control_hz=10.0))
    try:
        env.reset()
        rewinder = TrajectoryRewinder(horizon=50, tolerance=0.03)
        rewinder.record(env)
        start = np.asarray(env.robot_obs["qpos"]).copy()
        for _ in range(8):  # move joint 0 away in small position steps
            goal = np.asarray(env.robot_obs["qpos"]) + np.array([0.1, 0.0, 0.0, 0.0])
            env.step(torch.as_tensor(goal, dtype=torch.float32).unsqueeze(0))
            rewinder.record(env)
        assert abs(env.robot_obs["qpos"][0] - start[0]) > 0.3
        before = len(robot.hardware.received)
        obs, segment = rewinder.rewind(env, 8)
        assert np.max(np.abs(env.robot_obs["qpos"] - start)) < 0.05
        assert len(segment) > 0 and len(robot.hardware.received) - before == sum(s["sent"] is not None for s in segment)
        assert obs["state"].shape == (1, env.observation_spec["state"].shape[0])
        assert robot.failsafe_reason is None
    finally:
        env.close()


def _tiny_sac(env):
    policy = registry.build("policy", "sac_mlp", {"actor_hidden": (32,), "critic_hidden": (32,)},
                            observation_spec=env.observation_spec, action_spec=env.action_spec)  # fmt: skip
    algo = registry.build("algo", "sac", {"batch_size": 16}, policy=policy)
    return policy, algo


def test_learner_copies_interventions_into_the_demo_buffer_and_trains():
    env = _arm(4)
    policy, algo = _tiny_sac(env)
    fires = torch.tensor([True, False, True, False])
    op = ScriptedOperator(ScriptedOperatorConfig(action_dim=4, min_steps=100, max_per_episode=1),
                          expert=lambda obs: torch.ones(4, 4), rule=lambda obs: fires)  # fmt: skip
    actor = InterventionActor(env, policy, op)
    learner = Learner(policy, algo, LearnerConfig(min_buffer=16, weights_every=5))
    actor.reset(seed=0)
    for _ in range(10):
        row, _ = actor.step()
        learner.add(row)
        learner.train()
    assert len(learner.online) == 40 and len(learner.demos) == 20
    assert bool(learner.demos._storage[keys.IS_INTERVENTION][:20].all())
    assert learner.updates == 28  # from the 4th step (16 rows = one batch) on: 7 steps x 4 rows x utd 1
    batch = learner.sample(16)
    assert int((batch["source"] == 0).sum()) == 8  # half from the interventions
    assert learner.weights_due()
    loss0 = policy.bc_loss(learner.demos.sample(16)).item()
    opt = torch.optim.Adam(policy.actor_params(), lr=1e-2)
    for _ in range(30):  # HG-DAgger: BC steps on the aggregated operator labels
        loss = bc_step(policy, opt, learner.demos.sample(16))["bc_loss"]
    assert loss < loss0
