"""LMPolicy's shared prompt prefix (`share_prefix`): a group's common leading tokens run once, with the same
log-probs, entropies, values and gradients as running every row whole. A tiny random Llama on CPU."""

import dataclasses

import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("transformers")
pytest.importorskip("peft")

from embodied import keys  # noqa: E402
from embodied.algorithms.grpo import GRPO, group_order  # noqa: E402
from policies.lm import ATTENTION, TOKENS, LMConfig, LMPolicy  # noqa: E402
from policies.lm.policy import shared_prefixes  # noqa: E402


def policy(**overrides) -> LMPolicy:
    torch.manual_seed(0)  # LoRA's A: peft draws it from the global generator
    p = LMPolicy(LMConfig(**{"model": "tiny", "lora_rank": 4, "value_head": True, **overrides}))
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LoRA's B and the value head start at zero; give them weights so they matter
        for name, param in p.named_parameters():
            if "lora_B" in name or "value_head" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.3)
    return p


def batch(rows: list[list[tuple[int, bool]]], left: set[int]) -> tuple[TensorDict, torch.Tensor]:
    """Rows of (token, scored) padded to one width + 2, rows in `left` left padded, the rest right padded."""
    width = max(map(len, rows)) + 2
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.bool)
    score = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, row in enumerate(rows):
        at = width - len(row) if i in left else 0
        tokens[i, at: at + len(row)] = torch.tensor([t for t, _ in row])
        attention[i, at: at + len(row)] = True
        score[i, at: at + len(row)] = torch.tensor([s for _, s in row])
    return TensorDict({TOKENS: tokens, ATTENTION: attention}, batch_size=[len(rows)]), score


def groups_batch(g: torch.Generator) -> tuple[TensorDict, torch.Tensor]:
    """3 prompts (two with a common start) x 3 samples, replies of different lengths; the last group is multi-turn
    (reply, env tokens, reply): its samples differ from the first reply on."""
    def words(n):
        return torch.randint(3, 200, (n,), generator=g).tolist()

    prompts = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12], words(7)]
    rows = []
    for p, prompt in enumerate(prompts):
        for k in range(3):
            row = [(t, False) for t in prompt] + [(t, True) for t in words(1 + 3 * k + p)]
            if p == 2:
                row += [(t, False) for t in [13, 14, 15]] + [(t, True) for t in words(1 + k)]
            rows.append(row)
    return batch(rows, left={1, 4, 5, 8})


def run(p: LMPolicy, obs: TensorDict, score: torch.Tensor, share: bool):
    p.config = dataclasses.replace(p.config, share_prefix=share)
    p.zero_grad(set_to_none=True)
    log_prob, entropy, value = p.evaluate(obs, obs[TOKENS], {"score": score})
    (log_prob.sum() + 0.5 * entropy.sum() + 0.1 * value.sum()).backward()
    grads = {name: param.grad.clone() for name, param in p.named_parameters() if param.requires_grad}
    return log_prob.detach(), entropy.detach(), value.detach(), grads


def assert_same(a, b):
    for x, y in zip(a[:3], b[:3]):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    assert a[3].keys() == b[3].keys() and a[3]
    for name in a[3]:  # relative to each gradient's scale: float32 sums in another order
        scale = a[3][name].abs().max().clamp(min=1e-6)
        torch.testing.assert_close(a[3][name] / scale, b[3][name] / scale, rtol=0, atol=1e-4, msg=name)


def test_shared_prefix_gives_the_same_log_probs_and_gradients():
    p = policy()
    obs, score = groups_batch(torch.Generator().manual_seed(0))
    plan = shared_prefixes(obs[TOKENS], obs[ATTENTION], score)
    assert plan is not None
    leaders, source, shared = plan[:3]
    assert leaders == [0, 3, 6] and source == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # a group shares its prompt, never a token after its first differing one (the last group's first replies)
    assert shared[:6] == [6, 6, 6, 5, 5, 5] and 7 <= shared[6] == shared[8] < 7 + 3
    assert_same(run(p, obs, score, share=False), run(p, obs, score, share=True))
    assert any("lora_" in name for name in run(p, obs, score, share=True)[3])


def test_full_fine_tuning_and_no_value_head_match_too():
    p = policy(lora_rank=0, value_head=False)
    obs, score = groups_batch(torch.Generator().manual_seed(1))
    assert_same(run(p, obs, score, share=False), run(p, obs, score, share=True))


def test_rows_that_share_nothing_run_whole():
    p = policy()
    g = torch.Generator().manual_seed(2)
    rows = [[(t, False) for t in torch.randint(3, 200, (5,), generator=g).tolist()]
            + [(t, True) for t in torch.randint(3, 200, (2 + i,), generator=g).tolist()] for i in range(4)]
    obs, score = batch(rows, left={1, 2})
    assert shared_prefixes(obs[TOKENS], obs[ATTENTION], score) is None
    assert_same(run(p, obs, score, share=False), run(p, obs, score, share=True))
    # equal prompts but attention with a hole in a row: not a contiguous run, so no sharing either
    twins, score = batch([rows[0], rows[0][:5] + rows[1][5:]], left=set())
    assert shared_prefixes(twins[TOKENS], twins[ATTENTION], score) is not None
    twins[ATTENTION][0, 2] = False
    assert shared_prefixes(twins[TOKENS], twins[ATTENTION], score) is None


def test_group_order_keeps_groups_together():
    torch.manual_seed(0)
    group = torch.tensor([3, 3, 1, 1, 1, 7, 3, 0, 7])
    seen = set()
    for _ in range(20):
        order = group_order(group)
        assert sorted(order.tolist()) == list(range(len(group)))
        ids = group[order].tolist()
        assert all(ids.index(i) + ids.count(i) - 1 == len(ids) - 1 - ids[::-1].index(i) for i in set(ids))
        seen.add(tuple(dict.fromkeys(ids)))
    assert len(seen) > 1  # the groups are shuffled


def test_a_grpo_update_is_the_same_shared_or_not():
    obs, score = groups_batch(torch.Generator().manual_seed(3))
    n = obs.batch_size[0]
    data = TensorDict({keys.OBS: obs, keys.ACTION: obs[TOKENS], keys.MASK: score, keys.LOG_PROB: -5.0 * score.float(),
                       keys.REWARD: torch.arange(n).float() % 2, keys.GROUP: torch.arange(n) // 3,
                       keys.EXTRAS: TensorDict({"score": score}, batch_size=[n])}, batch_size=[n])
    after = []
    for share in (False, True):
        p = policy(value_head=False, share_prefix=share)
        algo = GRPO(GRPO.Config(lr=1e-2, group_size=3, minibatches=1), p)
        before = [param.detach().clone() for param in algo.params]
        algo.update(data)
        after.append([param.detach().clone() for param in algo.params])
    assert any((a - b).abs().max() > 1e-3 for a, b in zip(before, after[0]))  # the step moved the weights
    for a, b in zip(*after):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
