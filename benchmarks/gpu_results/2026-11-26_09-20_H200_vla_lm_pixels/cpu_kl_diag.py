"""Why does one PPO update move the pixel VLA by KL ~0.02 even at lr 1e-5? One batch from BC seed 1, one PPO update
(4 epochs x 4 minibatches) per setting from the same weights, KL(old||new) on the whole batch after it."""
import copy, sys, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the repo root
from embodied.compose import register_configs, compose
from embodied.build import make_env, make_policy, make_algo
from embodied.runner import init_from
from embodied.rollout import Collector
from embodied import keys

register_configs()
cfg = compose(["experiment=mujoco_reach_rgb_vla_ppo", "init_from=.s17bc/bc_seed1", "seed=1"])
torch.manual_seed(1)
env = make_env(cfg, 32, torch.device("cpu"))
policy = make_policy(cfg, env)
init_from.load(policy, cfg)
batch = Collector(env, policy, 32).collect()
flat = batch.reshape(-1)
obs, act = flat[keys.OBS], flat[keys.ACTION]
extras = flat.get(keys.EXTRAS, None)
with torch.no_grad():
    old = policy.evaluate(obs, act, extras)[0]
print("params", {n: sum(p.numel() for p in m.parameters()) for n, m in policy.named_children()})

def run(name, lr=1e-5, eps=1e-8, train=None):
    p = copy.deepcopy(policy)
    algo_cfg = {**cfg["algo"], "lr": lr, "critic_warmup": 0, "desired_kl": None}
    algo = make_algo(algo_cfg, p)
    for g in algo.optimizer.param_groups:
        g["eps"] = eps
    if train is not None:
        for n, prm in p.named_parameters():
            if not any(n.startswith(t) for t in train) and not n.startswith("critic"):
                prm.requires_grad_(False)
    torch.manual_seed(0)
    algo.update(batch.clone())
    with torch.no_grad():
        new = p.evaluate(obs, act, extras)[0]
    log_ratio = new - old
    kl = ((log_ratio.exp() - 1) - log_ratio).mean().item()
    print(f"{name:40s} KL {kl:.4f}  max |log ratio| {log_ratio.abs().max():.3f}")

run("all, lr 1e-5, eps 1e-8")
run("all, lr 1e-5, eps 1e-5", eps=1e-5)
run("all, lr 1e-6", lr=1e-6)
for part in ["vision", "projector", "state_proj", "lm", "action_queries"]:
    run(f"only {part}, lr 1e-5", train=[part])
