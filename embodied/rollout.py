"""Collector: runs a policy in a VecEnv and returns a time-major rollout.

    batch = collector.collect()    # TensorDict [T, N]
    batch["obs"]        observations the actions were taken in
    batch["action"], batch["log_prob"], batch["value"]
    batch["extras"]     the policy's act() extras, when it returns any (e.g. a denoising chain)
    batch["reward"], batch["terminated"], batch["done"]
    batch["next_obs"]   with Collector(..., keep_next_obs=True): the observation each action
                        led to (info["final_obs"] where the episode ended)
    batch["next_value"] V of the true next state: V(final_obs) where an episode
                        was truncated, V(next obs) otherwise (GAE zeroes it on
                        termination)
    batch["mask"]       envs with next-step autoreset (Isaac Gym): False on the step after a done,
                        whose action only reset the env; losses and replay skip it
    stats = collector.pop_episode_stats()   # finished episodes since last pop

GRPO trains from groups of episodes sharing an initial state: `collect_groups` and `GroupCollector`
(the same verbs as Collector) collect them; text envs have theirs in embodied/text_rollout.py.
"""

from __future__ import annotations

import torch
from gymnasium.vector import AutoresetMode
from tensordict import TensorDict

from embodied import keys
from embodied.envs import VecEnv
from embodied.policy import Policy


class Collector:
    def __init__(self, env: VecEnv, policy: Policy, steps: int, keep_next_obs: bool = False):
        self.env, self.policy, self.steps = env, policy, steps
        # off-policy learners need each step's true next observation (final_obs at episode ends);
        # on-policy ones do not, and images would double the rollout's memory
        self.keep_next_obs = keep_next_obs
        self.obs: TensorDict | None = None
        n, device = env.num_envs, env.device
        self.episode_return = torch.zeros(n, device=device)
        self.episode_length = torch.zeros(n, dtype=torch.long, device=device)
        self._finished: list[torch.Tensor] = []  # rows of (return, length, success) per done step
        self._buffer: TensorDict | None = None
        self.next_step_autoreset = env.metadata.get("autoreset_mode") == AutoresetMode.NEXT_STEP

    def reset(self, seed: int | None = None) -> None:
        self.obs, _ = self.env.reset(seed=seed)
        self.episode_return.zero_()
        self.episode_length.zero_()

    def _allocate(self, step: TensorDict) -> TensorDict:
        return step.unsqueeze(0).expand(self.steps, *step.batch_size).clone()

    @torch.no_grad()
    def collect(self) -> TensorDict:
        if self.obs is None:
            self.reset()
        env, policy = self.env, self.policy
        for t in range(self.steps):
            obs = self.obs
            action, log_prob, value, extras = policy.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            done = terminated | truncated
            step = TensorDict(
                {
                    keys.OBS: obs,
                    keys.ACTION: action,
                    keys.LOG_PROB: log_prob,
                    keys.VALUE: value,
                    keys.REWARD: reward,
                    keys.TERMINATED: terminated,
                    keys.TRUNCATED: truncated,
                    keys.DONE: done,
                    "next_value": value,  # placeholder, filled below
                },
                batch_size=[env.num_envs],
            )
            autoreset = info["autoreset"] if self.next_step_autoreset else None
            if autoreset is not None:
                step[keys.MASK] = ~autoreset
            if extras:  # e.g. a denoising chain: what policy.evaluate needs to score the action again
                step[keys.EXTRAS] = TensorDict(extras, batch_size=[env.num_envs])
            if self.keep_next_obs:
                true_next = next_obs.clone()
                if done.any():
                    true_next[done] = info["final_obs"][done]
                step[keys.NEXT_OBS] = true_next
            if self._buffer is None:
                self._buffer = self._allocate(step)
            buf = self._buffer
            buf[t] = step
            if truncated.any():
                # bootstrap a time-limit cut from the final observation, not the reset one
                buf["next_value"][t] = policy.value(info["final_obs"])
            self._track(reward, done, info, autoreset)
            self.obs = next_obs
        # V(s_{t+1}) is the value the policy computed at t+1; the last step needs one more critic pass
        next_value = torch.cat([buf[keys.VALUE][1:], policy.value(self.obs).unsqueeze(0)])
        # in place: the buffer's tensors stay those a collect-ahead worker shares (embodied/runner/collect_ahead.py)
        buf["next_value"].copy_(torch.where(buf[keys.TRUNCATED], buf["next_value"], next_value))
        return buf

    def _track(self, reward: torch.Tensor, done: torch.Tensor, info: dict, autoreset: torch.Tensor | None) -> None:
        self.episode_return += reward
        self.episode_length += 1 if autoreset is None else (~autoreset).long()
        if done.any():
            success = info.get(keys.SUCCESS, torch.zeros_like(done))
            rows = torch.stack([self.episode_return, self.episode_length.float(), success.float()], -1)
            self._finished.append(rows[done])
            self.episode_return.masked_fill_(done, 0.0)
            self.episode_length.masked_fill_(done, 0)

    def count(self, batch: TensorDict) -> int:
        """Env steps a rollout took."""
        return batch.numel()

    def pop_episode_stats(self) -> dict[str, float]:
        """Mean return, length and success of the episodes finished since the last call."""
        return pop_means(self._finished, ("return", "length", "success"))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Everything needed to continue collecting exactly where this left off."""
        state = {"episode_return": self.episode_return.clone(), "episode_length": self.episode_length.clone()}
        if self.obs is not None:
            state.update({f"obs.{k}": v.clone() for k, v in self.obs.flatten_keys(".").items()})
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.episode_return.copy_(state["episode_return"])
        self.episode_length.copy_(state["episode_length"])
        obs = {k[len("obs.") :]: v for k, v in state.items() if k.startswith("obs.")}
        if obs:
            self.obs = TensorDict(obs, batch_size=[self.env.num_envs]).unflatten_keys(".")


def pop_means(finished: list[torch.Tensor], names: tuple[str, ...]) -> dict[str, float]:
    """The mean of each column of the episode rows gathered since the last call (rows [n, len(names)] each) and
    their count, as `pop_episode_stats` reports them; empties `finished`."""
    if not finished:
        return {}
    rows = torch.cat(finished)
    finished.clear()
    return {"episodes": rows.shape[0], **dict(zip(names, rows.mean(0).tolist()))}


@torch.no_grad()
def collect_groups(env: VecEnv, policy: Policy, group_size: int, seed: int) -> TensorDict:
    """GRPO rollouts: env.num_envs // group_size initial states, each copied into `group_size`
    envs with `get_state`/`set_state`, then one episode per env (SimpleVLA-RL, Li et al. 2025,
    and RLinf-VLA sample each task instance several times from one initial state).

    Returns a TensorDict [B = num_envs]: `obs`, `action`, `log_prob`, `extras` and `mask`
    (True up to each env's first episode end) with a time axis [B, T]; `reward` (the episode's
    return) and `success` [B]; `group` [B]. Per-env snapshot tensors (leading dim num_envs) are
    copied from each group's first env; generator states (uint8 byte tensors) are kept.
    """
    n = env.num_envs
    if group_size < 1 or n % group_size:
        raise ValueError(f"group_size={group_size} must divide env.num_envs={n}")
    if not hasattr(env, "get_state"):
        raise TypeError(f"{type(env).__name__} has no get_state/set_state: group rollouts need identical starts")
    env.reset(seed=seed)
    leader = torch.arange(n, device=env.device) // group_size * group_size
    state = {k: v[leader] if v.dtype != torch.uint8 and v.dim() > 0 and v.shape[0] == n else v
             for k, v in env.get_state().items()}
    obs = env.set_state(state)
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    ret, success = torch.zeros(n, device=env.device), torch.zeros(n, dtype=torch.bool, device=env.device)
    steps = []
    for _ in range(env.max_episode_steps):
        action, log_prob, _, extras = policy.act(obs)
        step = TensorDict({keys.OBS: obs, keys.ACTION: action, keys.LOG_PROB: log_prob, keys.MASK: live.clone()},
                          batch_size=[n])
        if extras:
            step[keys.EXTRAS] = TensorDict(extras, batch_size=[n])
        steps.append(step)
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        ret += reward * live
        success |= done & live & info.get(keys.SUCCESS, torch.zeros_like(done))
        live &= ~done
        if not live.any():
            break
    batch = torch.stack(steps, 1)  # [B, T]
    out = TensorDict({keys.REWARD: ret, keys.SUCCESS: success, keys.GROUP: leader // group_size}, batch_size=[n])
    for key in batch.keys():
        out[key] = batch[key]
    return out


class GroupCollector:
    """GRPO's rollouts for the Trainer: each `collect` is one `collect_groups` call (env.num_envs // group_size
    initial states, `group_size` episodes each) from the next seed of the run's sequence.

        batch = collector.collect()       # TensorDict [B], time axis [B, T] (collect_groups)
        collector.count(batch)            # env steps it took: the steps before each env's episode end
    """

    def __init__(self, env: VecEnv, policy: Policy, group_size: int):
        self.env, self.policy, self.group_size = env, policy, group_size
        self.seed, self.calls = 0, 0
        self._finished: list[torch.Tensor] = []

    def reset(self, seed: int | None = None) -> None:
        self.seed, self.calls = int(seed or 0), 0

    def collect(self) -> TensorDict:
        # seeds a stride apart: a run's call k and another seed's call k never share initial states
        batch = collect_groups(self.env, self.policy, self.group_size, self.seed * 1_000_003 + self.calls)
        self.calls += 1
        length = batch[keys.MASK].sum(1).float()
        self._finished.append(torch.stack([batch[keys.REWARD], length, batch[keys.SUCCESS].float()], -1).cpu())
        return batch

    def count(self, batch: TensorDict) -> int:
        return int(batch[keys.MASK].sum())

    def pop_episode_stats(self) -> dict[str, float]:
        return pop_means(self._finished, ("return", "length", "success"))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"seed": torch.tensor(self.seed), "calls": torch.tensor(self.calls)}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.seed, self.calls = int(state["seed"]), int(state["calls"])
