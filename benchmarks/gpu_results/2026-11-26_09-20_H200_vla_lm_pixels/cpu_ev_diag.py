"""The BC critic on PPO's first batches: explained variance of the GAE returns, per seed's checkpoint (1 batch each),
and with lambda 1 (Monte Carlo within the rollout)."""
import sys, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the repo root
from embodied.compose import register_configs, compose
from embodied.build import make_env, make_policy
from embodied.runner import init_from
from embodied.rollout import Collector
from embodied.algorithms.advantages import gae
from embodied import keys

register_configs()
for seed in (0, 1, 2):
    cfg = compose(["experiment=mujoco_reach_rgb_vla_ppo", f"init_from=.s17bc/bc_seed{seed}", f"seed={seed}"])
    torch.manual_seed(seed)
    env = make_env(cfg, 32, torch.device("cpu"))
    policy = make_policy(cfg, env)
    init_from.load(policy, cfg)
    col = Collector(env, policy, 32)
    for it in range(2):
        b = col.collect()
        for lam in (0.95, 1.0):
            adv, ret = gae(b[keys.REWARD], b[keys.VALUE], b["next_value"], b[keys.TERMINATED].float(),
                           b[keys.DONE].float(), 0.99, lam)
            v = b[keys.VALUE]
            ev = 1 - (ret - v).var() / ret.var()
            print(f"seed {seed} batch {it} lam {lam}: EV {ev:.3f}  ret mean {ret.mean():.2f} std {ret.std():.2f}  "
                  f"value mean {v.mean():.2f} std {v.std():.2f}  reward/step {b[keys.REWARD].mean():.3f}")
