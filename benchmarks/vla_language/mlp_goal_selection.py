"""Arm reach: how much of BC's success needs the goal, and in which form? A plain MLP (256 x 2, MSE, 3000 updates)
cloned from the scripted expert with (A) the full state (one-hot of the goal ball and goal - gripper), (B) the
one-hot but not the difference, (C) neither (all three balls, no word of which). 500 evaluation episodes.

    python benchmarks/vla_language/mlp_goal_selection.py 500      # demos
"""
import sys, torch, time
from sims.arm_reach.env import ArmReachEnv
from sims.arm_reach.scripted import scripted_action
torch.manual_seed(0)
DEMOS = int(sys.argv[1]) if len(sys.argv) > 1 else 500
env = ArmReachEnv(ArmReachEnv.Config(), num_envs=DEMOS)
obs, _ = env.reset(seed=0)
S, A, alive = [], [], torch.ones(DEMOS, dtype=torch.bool)
for t in range(100):
    a = scripted_action(env)
    S.append(obs["state"][alive]); A.append(a[alive])
    obs, r, term, trunc, info = env.step(a)
    alive &= ~(term | trunc)
    if not alive.any(): break
S, A = torch.cat(S), torch.cat(A)
print("frames", len(S))
cols = {"A_delta": slice(0, 26), "B_onehot": slice(0, 23), "C_none": slice(0, 20)}
for name, sl in cols.items():
    torch.manual_seed(0)
    x = S[:, sl]; mu, sd = x.mean(0), x.std(0) + 1e-6
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 256), torch.nn.GELU(), torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 4))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    for i in range(3000):
        idx = torch.randint(0, len(x), (256,))
        loss = ((net((x[idx] - mu) / sd) - A[idx]) ** 2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
    ev = ArmReachEnv(ArmReachEnv.Config(), num_envs=500)
    o, _ = ev.reset(seed=123); done = torch.zeros(500, dtype=torch.bool); succ = torch.zeros(500, dtype=torch.bool)
    with torch.no_grad():
        for t in range(100):
            o, r, term, trunc, info = ev.step(net((o["state"][:, sl] - mu) / sd).clamp(-1, 1))
            succ |= term & ~done; done |= term | trunc
    print(name, "loss %.4f" % loss.item(), "success %.1f%%" % (100 * succ.float().mean()))
