"""The update-to-data schedule of off-policy learning, shared by the off-policy loop and the correction
session's learner.

    schedule = UpdateSchedule(utd_ratio=2.0, critic_warmup_updates=0)
    schedule.pay(transitions=16)                 # each new transition pays for utd_ratio updates
    for update_actor in schedule.due():          # the updates paid for, in order
        algo.update(sampler.sample(256, generator), update_actor=update_actor)

A fractional ratio carries over to the next payment. The actor steps once per round(utd_ratio) critic
steps (RLPD, Ball et al. 2023, Alg. 1), and not during the first `critic_warmup_updates` (critic only).
"""

from __future__ import annotations

from collections.abc import Iterator


class UpdateSchedule:
    def __init__(self, utd_ratio: float, critic_warmup_updates: int = 0):
        self.utd_ratio, self.critic_warmup_updates = utd_ratio, critic_warmup_updates
        self.actor_every = max(1, round(utd_ratio))
        self.updates, self.credit = 0, 0.0

    def pay(self, transitions: int) -> None:
        self.credit += transitions * self.utd_ratio

    def forgive(self) -> None:
        """Drop the credit (data that arrived before learning could start, or was trained on before a restart)."""
        self.credit = 0.0

    def due(self, limit: int | None = None) -> Iterator[bool]:
        """One `update_actor` flag per update paid for (at most `limit`), counting each in `updates`."""
        done = 0
        while self.credit >= 1.0 and (limit is None or done < limit):
            self.credit -= 1.0
            self.updates += 1
            done += 1
            yield self.updates > self.critic_warmup_updates and self.updates % self.actor_every == 0

    def state_dict(self) -> dict:
        return {"updates": self.updates, "update_credit": self.credit}

    def load_state_dict(self, state: dict) -> None:
        self.updates, self.credit = state["updates"], state["update_credit"]
