"""The byte-level VLA (parallel decoding, 32 bins) cloned from the scripted arm-reach expert with the goal given
(onehot) as a one-hot in the state and no words, (words) only by the instruction, (color) by the colour word alone;
then 500 episodes with the true goal and with another ball's (the one-hot rolled, or the words naming another ball).
Extra KEY=VALUE arguments are VLAConfig fields.

    python benchmarks/vla_language/vla_goal_selection.py words 500 1500 language_film=1   # variant demos updates
"""
import sys, time, torch
from tensordict import TensorDict
from embodied.specs import Spec, encode_text, text_spec
from sims.arm_reach.env import ArmReachEnv, COLORS
from sims.arm_reach.scripted import scripted_action
from policies.vla.policy import VLAPolicy

variant, DEMOS, UPDATES = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
extra = dict(a.split("=") for a in sys.argv[4:])
torch.manual_seed(0)
L = 40
COLOR_BYTES = encode_text(list(COLORS), L)

def view(env, obs):
    state = obs["state"]
    if variant == "onehot":
        return TensorDict({"state": state[:, :23]}, batch_size=obs.batch_size)
    lang = obs["language"] if variant == "words" else COLOR_BYTES[env.goal]
    return TensorDict({"state": state[:, :20], "language": lang}, batch_size=obs.batch_size)

cfg = ArmReachEnv.Config(max_instruction_bytes=L)
env = ArmReachEnv(cfg, num_envs=DEMOS)
obs, _ = env.reset(seed=0)
O, A, alive = [], [], torch.ones(DEMOS, dtype=torch.bool)
for t in range(100):
    a = scripted_action(env)
    O.append(view(env, obs)[alive]); A.append(a[alive])
    obs, r, term, trunc, info = env.step(a)
    alive &= ~(term | trunc)
    if not alive.any(): break
data = TensorDict({"obs": torch.cat(O), "action": torch.cat(A)}, batch_size=[sum(len(a) for a in A)])
ospec = {"state": Spec((data["obs", "state"].shape[1],), torch.float32)}
if variant != "onehot":
    ospec["language"] = text_spec(L)
pcfg = VLAPolicy.Config(n_bins=32, decoding="parallel", **{k: (int(v) if v.isdigit() else v) for k, v in extra.items()})
policy = VLAPolicy(pcfg, ospec, env.action_spec)
policy.fit_normalizers(data)
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, UPDATES)
t0 = time.time()
for i in range(UPDATES):
    loss = policy.bc_loss(data[torch.randint(0, len(data), (256,))])
    opt.zero_grad(); loss.backward(); opt.step(); sched.step()
    if i % 500 == 0 or i == UPDATES - 1:
        print(i, "loss %.3f" % loss.item(), "%.0fs" % (time.time() - t0), flush=True)
for shift in (0, 1):
    ev = ArmReachEnv(ArmReachEnv.Config(max_instruction_bytes=L), num_envs=500)
    o, _ = ev.reset(seed=123); done = torch.zeros(500, dtype=torch.bool); succ = torch.zeros(500, dtype=torch.bool)
    with torch.no_grad():
        for t in range(100):
            v = view(ev, o)
            if shift and variant == "onehot": v["state"][:, 20:23] = v["state"][:, 20:23].roll(1, -1)
            elif shift and variant == "words": v["language"] = ev.instructions[ev.template * 3 + (ev.goal + 1) % 3]
            elif shift: v["language"] = COLOR_BYTES[(ev.goal + 1) % 3]
            o, r, term, trunc, info = ev.step(policy.act(v, deterministic=True).action)
            succ |= term & ~done; done |= term | trunc
    print(variant, extra, "shift", shift, "success %.1f%%" % (100 * succ.float().mean()), flush=True)
