"""Does what the actor's cameras make of the goal predict its success beyond what the critic is told? Episodes of the
BC policy from their first step (collect_groups, group size 1); regress the episode return on the first observation's
(a) normalized state + privileged goal (the asymmetric critic's input), (b) the same + the actor's camera features
(each camera's tokens averaged, as the aux head reads them); held-out R^2 over 4 folds."""
import sys, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))  # the repo root
from embodied.compose import register_configs, compose
from embodied.build import make_env, make_policy
from embodied.runner import init_from
from embodied.rollout import collect_groups
from embodied import keys

register_configs()
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
calls = int(sys.argv[2]) if len(sys.argv) > 2 else 10
cfg = compose(["experiment=mujoco_reach_rgb_vla_ppo", f"init_from=.s17bc/bc_seed{seed}", f"seed={seed}"])
torch.manual_seed(seed)
env = make_env(cfg, 64, torch.device("cpu"))
policy = make_policy(cfg, env)
init_from.load(policy, cfg)
inputs_a, inputs_b, returns, successes = [], [], [], []
with torch.no_grad():
    for call in range(calls):
        b = collect_groups(env, policy, 1, seed=10_000 + call)
        obs = b[keys.OBS][:, 0]
        base = torch.cat([policy.state_norm(obs[keys.STATE]), obs[keys.PRIVILEGED]], -1)
        cams = torch.cat([f.mean(1) for f in policy.camera_features(obs)], -1)
        inputs_a.append(base); inputs_b.append(torch.cat([base, cams], -1))
        returns.append(b[keys.REWARD]); successes.append(b[keys.SUCCESS].float())
ret, succ = torch.cat(returns), torch.cat(successes)
torch.save({"a": torch.cat(inputs_a), "b": torch.cat(inputs_b), "ret": ret, "succ": succ}, f"/tmp/critic_vision_seed{seed}.pt")
print(f"seed {seed}: {len(ret)} episodes, success {succ.mean():.3f}, return {ret.mean():.2f} +- {ret.std():.2f}")

def heldout_r2(x: torch.Tensor, y: torch.Tensor, model: str) -> float:
    """R^2 on each fold's held-out quarter, pooled: ridge regression (lambda 10 on standardized inputs) or a small
    MLP (32 x 32, 300 full-batch Adam steps, weight decay 1e-3)."""
    x = (x - x.mean(0)) / (x.std(0) + 1e-6)
    folds = torch.arange(len(y)) % 4
    err, var = 0.0, 0.0
    for k in range(4):
        tr, te = folds != k, folds == k
        mu, sd = y[tr].mean(), y[tr].std()
        if model == "ridge":
            a = torch.cat([x[tr], torch.ones(int(tr.sum()), 1)], 1)
            w = torch.linalg.solve(a.T @ a + 10.0 * torch.eye(a.shape[1]), a.T @ ((y[tr] - mu) / sd))
            pred = torch.cat([x[te], torch.ones(int(te.sum()), 1)], 1) @ w * sd + mu
        else:
            torch.manual_seed(k)
            net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                      torch.nn.ReLU(), torch.nn.Linear(32, 1))
            opt = torch.optim.Adam(net.parameters(), 1e-3, weight_decay=1e-3)
            for _ in range(300):
                loss = ((net(x[tr]).squeeze(-1) - (y[tr] - mu) / sd) ** 2).mean()
                opt.zero_grad(); loss.backward(); opt.step()
            with torch.no_grad():
                pred = net(x[te]).squeeze(-1) * sd + mu
        err += ((pred - y[te]) ** 2).sum().item(); var += ((y[te] - y[tr].mean()) ** 2).sum().item()
    return 1 - err / var

for name, x in (("state + privileged goal (the critic's input)", torch.cat(inputs_a)),
                ("the same + the actor's camera features", torch.cat(inputs_b))):
    for model in ("ridge", "mlp"):
        print(f"  {name:48s} {model:5s} held-out R^2 of the return {heldout_r2(x, ret, model):.3f}, "
              f"of success {heldout_r2(x, succ, model):.3f}")
