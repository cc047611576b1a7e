"""FAKE Isaac Gym: `FakeVecTask` reproduces IsaacGymEnvs' `VecTask` API over a torch cart-pole.

What is reproduced exactly (isaacgymenvs/tasks/base/vec_task.py, IsaacGymEnvs 1.5,
Isaac Gym Preview 4):

- the config dict (`cfg["env"]["numEnvs" | "numObservations" | "numStates" |
  "numActions" | "controlFrequencyInv" | "clipObservations" | "clipActions"]`,
  `cfg["sim"]["use_gpu_pipeline"]`), `device` / `rl_device`, the spaces
  (`obs_space` unbounded, `act_space` [-1, 1]);
- the buffers: `obs_buf` float [N, num_obs], `states_buf`, `rew_buf` float [N],
  `reset_buf` long [N] initialised to ONES (so the first step resets every env),
  `timeout_buf`, `progress_buf` long [N], `extras` dict;
- `step(actions) -> (obs_dict, rew_buf, reset_buf, extras)`: clamp the actions
  to `clip_actions`, `pre_physics_step`, `control_freq_inv` simulate calls,
  `post_physics_step`, then `timeout_buf = (progress_buf >= max_episode_length
  - 1) & (reset_buf != 0)` into `extras["time_outs"]` and `obs_dict["obs"]`
  clamped to `clip_obs` (plus `obs_dict["states"]` when num_states > 0);
- `reset()` returns the CURRENT obs_buf and computes nothing (zeros before the
  first step), `reset_done()`, `reset_idx(env_ids)`, `get_state()`, `zero_actions()`;
- the auto-reset timing of IsaacGymEnvs tasks: a task marks `reset_buf` when an
  episode ends, the obs returned at that step is the episode's LAST one, and the
  env is reset inside the NEXT step's `post_physics_step` (so that step's action
  is spent on the finished episode and its obs is the new episode's first);
- randomness from torch's global generator (tasks call `torch.rand` without a
  generator; IsaacGymEnvs seeds it with `set_seed`).

`FakeCartpoleTask` follows isaacgymenvs/tasks/cartpole.py (observation layout,
reset distribution, reward and reset rules, 500-step episodes, effort-driven
cart), with the simulator replaced by `embodied.testing.cartpole`. What it does
NOT reproduce: PhysX, the import-before-torch rule, rendering, domain
randomization. It is a fake for tests, not a simulator.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import torch

from embodied.testing.cartpole import cartpole_step


class FakeVecTask:
    """FAKE of `isaacgymenvs.tasks.base.vec_task.VecTask`; subclasses implement the task hooks."""

    def __init__(self, config: dict, rl_device: str, sim_device: str, graphics_device_id: int, headless: bool):
        self.cfg = config
        device_type, _, device_id = sim_device.partition(":")
        self.device_type, self.device_id = device_type, int(device_id or 0)
        self.device = "cpu"
        if config["sim"]["use_gpu_pipeline"]:
            if self.device_type.lower() in ("cuda", "gpu"):
                self.device = f"cuda:{self.device_id}"
            else:  # as Isaac Gym does: the GPU pipeline needs GPU simulation
                config["sim"]["use_gpu_pipeline"] = False
        self.rl_device = rl_device
        self.headless, self.graphics_device_id = headless, graphics_device_id
        env = config["env"]
        self.num_environments = env["numEnvs"]
        self.num_observations = env.get("numObservations", 0)
        self.num_states = env.get("numStates", 0)
        self.num_actions = env["numActions"]
        self.control_freq_inv = env.get("controlFrequencyInv", 1)
        self.obs_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.num_observations,))
        self.state_space = gymnasium.spaces.Box(-np.inf, np.inf, (self.num_states,))
        self.act_space = gymnasium.spaces.Box(-1.0, 1.0, (self.num_actions,))
        self.clip_obs = env.get("clipObservations", np.inf)
        self.clip_actions = env.get("clipActions", np.inf)
        self.control_steps = 0
        self.create_sim()
        self.allocate_buffers()
        self.obs_dict: dict[str, torch.Tensor] = {}

    # --- VecTask's properties ------------------------------------------------

    @property
    def num_envs(self) -> int:
        return self.num_environments

    @property
    def num_obs(self) -> int:
        return self.num_observations

    @property
    def num_acts(self) -> int:
        return self.num_actions

    @property
    def observation_space(self) -> gymnasium.Space:
        return self.obs_space

    @property
    def action_space(self) -> gymnasium.Space:
        return self.act_space

    # --- VecTask's methods ---------------------------------------------------

    def allocate_buffers(self) -> None:
        n, dev = self.num_envs, self.device
        self.obs_buf = torch.zeros((n, self.num_obs), device=dev, dtype=torch.float)
        self.states_buf = torch.zeros((n, self.num_states), device=dev, dtype=torch.float)
        self.rew_buf = torch.zeros(n, device=dev, dtype=torch.float)
        self.reset_buf = torch.ones(n, device=dev, dtype=torch.long)
        self.timeout_buf = torch.zeros(n, device=dev, dtype=torch.long)
        self.progress_buf = torch.zeros(n, device=dev, dtype=torch.long)
        self.randomize_buf = torch.zeros(n, device=dev, dtype=torch.long)
        self.extras: dict[str, Any] = {}

    def get_state(self) -> torch.Tensor:
        return torch.clamp(self.states_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)

    def step(self, actions: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, dict]:
        action_tensor = torch.clamp(actions, -self.clip_actions, self.clip_actions)
        self.pre_physics_step(action_tensor)
        for _ in range(self.control_freq_inv):
            self.simulate()
        self.post_physics_step()
        self.control_steps += 1
        self.timeout_buf = (self.progress_buf >= self.max_episode_length - 1) & (self.reset_buf != 0)
        self.extras["time_outs"] = self.timeout_buf.to(self.rl_device)
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict, self.rew_buf.to(self.rl_device), self.reset_buf.to(self.rl_device), self.extras

    def zero_actions(self) -> torch.Tensor:
        return torch.zeros([self.num_envs, self.num_actions], dtype=torch.float32, device=self.rl_device)

    def reset(self) -> dict[str, torch.Tensor]:
        """As VecTask: returns the current buffers and computes nothing."""
        self.obs_dict["obs"] = torch.clamp(self.obs_buf, -self.clip_obs, self.clip_obs).to(self.rl_device)
        if self.num_states > 0:
            self.obs_dict["states"] = self.get_state()
        return self.obs_dict

    def reset_done(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        done_env_ids = self.reset_buf.nonzero(as_tuple=False).flatten()
        if len(done_env_ids) > 0:
            self.reset_idx(done_env_ids)
        return self.reset(), done_env_ids

    # --- hooks a task implements (abstract in VecTask) ------------------------

    def create_sim(self) -> None:
        raise NotImplementedError

    def simulate(self) -> None:  # stands in for gym.simulate(sim)
        raise NotImplementedError

    def pre_physics_step(self, actions: torch.Tensor) -> None:
        raise NotImplementedError

    def post_physics_step(self) -> None:
        raise NotImplementedError

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        raise NotImplementedError


def cartpole_config(num_envs: int = 16, max_episode_length: int = 500, num_states: int = 0) -> dict:
    """IsaacGymEnvs' cfg/task/Cartpole.yaml values (maxEpisodeLength and numStates are fake-only knobs)."""
    return {
        "env": {
            "numEnvs": num_envs,
            "envSpacing": 4.0,
            "resetDist": 3.0,
            "maxEffort": 400.0,
            "clipObservations": 5.0,
            "clipActions": 1.0,
            "maxEpisodeLength": max_episode_length,
            "numStates": num_states,
        },
        "sim": {"dt": 0.0166, "up_axis": "z", "use_gpu_pipeline": False},
        "physics_engine": "physx",
    }


class FakeCartpoleTask(FakeVecTask):
    """FAKE of IsaacGymEnvs' `Cartpole` task (same observations, resets and rewards; torch dynamics)."""

    def __init__(self, cfg: dict, rl_device: str = "cpu", sim_device: str = "cpu", graphics_device_id: int = -1,
                 headless: bool = True):
        self.reset_dist = cfg["env"]["resetDist"]
        self.max_push_effort = cfg["env"]["maxEffort"]
        self.max_episode_length = cfg["env"].get("maxEpisodeLength", 500)
        cfg["env"]["numObservations"] = 4
        cfg["env"]["numActions"] = 1
        super().__init__(cfg, rl_device, sim_device, graphics_device_id, headless)
        self.dof_pos = self.dof_state.view(self.num_envs, 2, 2)[..., 0]  # [N, (cart, pole)] views, as gymtorch wraps
        self.dof_vel = self.dof_state.view(self.num_envs, 2, 2)[..., 1]

    def create_sim(self) -> None:
        self.dt = self.cfg["sim"]["dt"]
        self._sim_state = torch.zeros(self.num_envs * 2, 2, device=self.device)  # the simulator's own copy
        self.dof_state = torch.zeros(self.num_envs * 2, 2, device=self.device)  # the wrapped tensor
        self._force = torch.zeros(self.num_envs, device=self.device)

    def simulate(self) -> None:
        s = self._sim_state.view(self.num_envs, 2, 2)
        out = cartpole_step(s[:, 0, 0], s[:, 0, 1], s[:, 1, 0], s[:, 1, 1], self._force, self.dt)
        self._sim_state = torch.stack(out, -1).view(self.num_envs, 2, 2).reshape(-1, 2)

    def compute_observations(self, env_ids=None) -> torch.Tensor:
        self.dof_state.copy_(self._sim_state)  # refresh_dof_state_tensor
        self.obs_buf[:, 0], self.obs_buf[:, 1] = self.dof_pos[:, 0], self.dof_vel[:, 0]
        self.obs_buf[:, 2], self.obs_buf[:, 3] = self.dof_pos[:, 1], self.dof_vel[:, 1]
        if self.num_states > 0:  # fake-only privileged state: observations and episode progress
            self.states_buf[:] = 0.0
            self.states_buf[:, :4] = self.obs_buf
            self.states_buf[:, 4 % self.num_states] = self.progress_buf.float() / self.max_episode_length
        return self.obs_buf

    def compute_reward(self) -> None:
        cart_pos, cart_vel, pole_angle, pole_vel = self.obs_buf.unbind(-1)
        reward = 1.0 - pole_angle * pole_angle - 0.01 * cart_vel.abs() - 0.005 * pole_vel.abs()
        failed = (cart_pos.abs() > self.reset_dist) | (pole_angle.abs() > np.pi / 2)
        self.rew_buf[:] = torch.where(failed, torch.full_like(reward, -2.0), reward)
        reset = torch.where(failed, torch.ones_like(self.reset_buf), self.reset_buf)
        self.reset_buf[:] = torch.where(self.progress_buf >= self.max_episode_length - 1, 1, reset)

    def reset_idx(self, env_ids: torch.Tensor) -> None:
        positions = 0.2 * (torch.rand((len(env_ids), 2), device=self.device) - 0.5)
        velocities = 0.5 * (torch.rand((len(env_ids), 2), device=self.device) - 0.5)
        self.dof_pos[env_ids, :] = positions
        self.dof_vel[env_ids, :] = velocities
        rows = (env_ids.long()[:, None] * 2 + torch.arange(2, device=self.device)).reshape(-1)
        self._sim_state[rows] = self.dof_state[rows]  # set_dof_state_tensor_indexed
        self.reset_buf[env_ids] = 0
        self.progress_buf[env_ids] = 0

    def pre_physics_step(self, actions: torch.Tensor) -> None:
        self._force = actions.to(self.device).reshape(self.num_envs) * self.max_push_effort

    def post_physics_step(self) -> None:
        self.progress_buf += 1
        env_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(env_ids) > 0:
            self.reset_idx(env_ids)
        self.compute_observations()
        self.compute_reward()
