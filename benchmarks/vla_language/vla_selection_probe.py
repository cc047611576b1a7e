"""Can the VLA pick a state entry by a word at all? A synthetic batch: a random state holding three "balls", the
arm-reach instructions, and the action = 0.9 x the named ball. Prints the error to the named ball and to another.

    python benchmarks/vla_language/vla_selection_probe.py [language_film=1] [onehot=1] [updates=600]
"""
import sys, torch
from tensordict import TensorDict
from embodied.specs import Spec, encode_text, text_spec
from sims.arm_reach.env import TEMPLATES, COLORS
from policies.vla.policy import VLAPolicy
torch.manual_seed(0)
N, L = 8192, 40
args = dict(a.split("=") for a in sys.argv[1:])
onehot = int(args.pop("onehot", 0)); updates = int(args.pop("updates", 600))
goal = torch.randint(0, 3, (N,)); tmpl = torch.randint(0, 4, (N,))
lang = encode_text([TEMPLATES[t].format(COLORS[g]) for t, g in zip(tmpl.tolist(), goal.tolist())], L)
state = torch.rand(N, 20) * 2 - 1
if onehot: state = torch.cat([state, torch.nn.functional.one_hot(goal, 3).float()], 1)
balls = state[:, 11:20].view(N, 3, 3)
action = torch.zeros(N, 4); action[:, :3] = balls[torch.arange(N), goal] * 0.9
data = TensorDict({"obs": {"state": state, "language": lang}, "action": action}, batch_size=[N])
pol = VLAPolicy(VLAPolicy.Config(n_bins=32, decoding="parallel", **{k: int(v) for k, v in args.items()}),
                {"state": Spec((state.shape[1],), torch.float32), "language": text_spec(L)}, Spec((4,), torch.float32, -1.0, 1.0))
pol.fit_normalizers(data)
opt = torch.optim.Adam(pol.parameters(), 1e-3)
for i in range(updates + 1):
    loss = pol.bc_loss(data[torch.randint(0, N - 1024, (256,))]); opt.zero_grad(); loss.backward(); opt.step()
    if i % 200 == 0:
        with torch.no_grad():
            a = pol.act(data["obs"][-1024:], deterministic=True).action[:, :3]
        err = (a - action[-1024:, :3]).abs().mean().item()
        other = (a - (balls[-1024:].roll(1, 1)[torch.arange(1024), goal[-1024:]] * 0.9)).abs().mean().item()
        print(sys.argv[1:], i, "loss %.3f" % loss.item(), "err to named %.3f to other %.3f" % (err, other), flush=True)
