"""Token vocabularies of the VLA: UTF-8 bytes for language and uniform bins for actions.

    vocab = TokenLayout(vocab_size=515, n_bins=256)
    ids = vocab.text_ids(obs["language"])          # uint8 [N, L] -> int64 [N, L]
    text = InstructionTokenizer(hf_tokenizer, width=12)   # a pretrained backbone's own tokenizer instead
    ids = text(obs["language"])                    # uint8 [N, L] -> its ids int64 [N, 12], left-padded
    bins = ActionTokenizer(n_bins=256)
    ids = vocab.action_ids(bins.tokenize(a))       # a [..., A] in [-1, 1] -> token ids [..., A]
    a = bins.detokenize(vocab.action_bins(ids))    # bin centres, within half a bin of the input

Language. The env's `language` observation is zero-padded UTF-8 bytes
(embodied.specs.encode_text); byte b becomes token `byte_offset + b`, the
byte-level scheme of ByT5 (Xue et al. 2022, "ByT5: Towards a token-free future
with pre-trained byte-to-byte models", which offsets its 256 byte ids by 3
special tokens). No tokenizer files are needed, so nothing downloads. A
pretrained backbone reads the instruction in its own vocabulary instead: the
bytes are decoded to text and tokenized by the backbone's tokenizer
(InstructionTokenizer); there is no byte fallback.

Actions. Each action dimension, normalized to [-1, 1], is cut into `n_bins`
uniform bins whose ids are the last `n_bins` of the backbone's vocabulary, as in
OpenVLA (Kim et al. 2024, Sec. 3.2: 256 bins, "overwrite the 256 least used
tokens" at the end of the Llama vocabulary). OpenVLA places 256 bin edges and
so decodes to 255 centres; here there are `n_bins` equal bins of width
2 / n_bins, so every id is a bin and the round trip is within half a bin.
"""

from __future__ import annotations

import torch

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # ByT5's special ids; bytes start after them
BYTE_OFFSET = 3


class ActionTokenizer:
    """Uniform per-dimension bins over [-1, 1]: value <-> bin index in [0, n_bins)."""

    def __init__(self, n_bins: int = 256):
        if n_bins < 2:
            raise ValueError(f"n_bins={n_bins} must be >= 2")
        self.n_bins = n_bins
        self.width = 2.0 / n_bins

    def tokenize(self, action: torch.Tensor) -> torch.Tensor:
        """Normalized action [...] -> int64 bin index [...]; values outside [-1, 1] go to the end bins."""
        index = torch.floor((action.float() + 1.0) / self.width).long()
        return index.clamp(0, self.n_bins - 1)

    def detokenize(self, index: torch.Tensor) -> torch.Tensor:
        """Bin index [...] -> the bin's centre [...] in (-1, 1)."""
        if bool(((index < 0) | (index >= self.n_bins)).any()):
            raise ValueError(f"bin indices must lie in [0, {self.n_bins}); got {index.min()}..{index.max()}")
        return -1.0 + (index.float() + 0.5) * self.width


class TokenLayout:
    """Where bytes, specials and action bins sit in a backbone vocabulary of `vocab_size` ids."""

    def __init__(self, vocab_size: int, n_bins: int, byte_offset: int | None = BYTE_OFFSET):
        """`byte_offset` None: a pretrained vocabulary, whose own tokenizer reads the language (no byte ids)."""
        if byte_offset is None and vocab_size <= n_bins:
            raise ValueError(f"vocab_size={vocab_size} cannot hold {n_bins} action bins and any other token")
        if byte_offset is not None and vocab_size < byte_offset + 256 + n_bins:
            raise ValueError(f"vocab_size={vocab_size} cannot hold {byte_offset} specials, 256 bytes and "
                             f"{n_bins} action bins: it needs >= {byte_offset + 256 + n_bins}")
        self.vocab_size, self.n_bins, self.byte_offset = vocab_size, n_bins, byte_offset
        self.first_action = vocab_size - n_bins  # id of bin 0

    def text_ids(self, language: torch.Tensor) -> torch.Tensor:
        """uint8 bytes [N, L] -> ids [N, L]; padding bytes (0) become PAD_ID."""
        if language.dtype != torch.uint8:
            raise ValueError(f"language must be uint8 UTF-8 bytes (embodied.specs.encode_text), got {language.dtype}")
        if self.byte_offset is None:
            raise ValueError("this vocabulary has no byte ids: a pretrained backbone's tokenizer reads the language")
        ids = language.long() + self.byte_offset
        return torch.where(language == 0, torch.full_like(ids, PAD_ID), ids)

    def action_ids(self, bins: torch.Tensor) -> torch.Tensor:
        return bins + self.first_action

    def action_bins(self, ids: torch.Tensor) -> torch.Tensor:
        bins = ids - self.first_action
        if bool(((bins < 0) | (bins >= self.n_bins)).any()):
            raise ValueError(f"token ids outside the action range [{self.first_action}, {self.vocab_size})")
        return bins


class InstructionTokenizer:
    """The env's language bytes through a pretrained backbone's own tokenizer, at a fixed width.

    Each row's bytes (zero-padded UTF-8, embodied.specs.encode_text) are decoded to text and become
    `tokenizer(text).input_ids` (with whatever special tokens the tokenizer adds itself), left-padded
    with the tokenizer's pad id to `width` ids: the instruction ends right before the first action
    token, as OpenVLA's prompt ends right before its action tokens, and a row's ids never depend on
    the other rows of its batch. Rollouts repeat a few instructions, so each distinct byte string is
    tokenized once and cached.
    """

    MAX_CACHED = 65_536  # distinct instructions kept; the cache starts over beyond this

    def __init__(self, tokenizer, width: int):
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError(f"{type(tokenizer).__name__} has neither a pad nor an eos token to pad instructions with")
        if width < 1:
            raise ValueError(f"width={width} must be >= 1")
        self.tokenizer, self.width, self.pad_id = tokenizer, width, pad
        self.cache: dict[bytes, torch.Tensor] = {}

    def encode(self, raw: bytes) -> torch.Tensor:
        """One instruction's bytes (zero padding allowed) -> int64 ids [width], cached."""
        ids = self.cache.get(raw)
        if ids is None:
            text = raw.rstrip(b"\0").decode("utf-8")
            tokens = self.tokenizer(text).input_ids
            if len(tokens) > self.width:
                raise ValueError(f"instruction {text!r} is {len(tokens)} tokens, more than the width {self.width} "
                                 "(policy.language_tokens)")
            if len(self.cache) >= self.MAX_CACHED:
                self.cache.clear()
            ids = self.cache[raw] = torch.tensor([self.pad_id] * (self.width - len(tokens)) + tokens)
        return ids

    def __call__(self, language: torch.Tensor) -> torch.Tensor:
        """uint8 bytes [N, L] -> ids int64 [N, width] on language's device."""
        if language.dtype != torch.uint8:
            raise ValueError(f"language must be uint8 UTF-8 bytes (embodied.specs.encode_text), got {language.dtype}")
        rows, inverse = torch.unique(language, dim=0, return_inverse=True)  # a batch holds few distinct instructions
        table = torch.stack([self.encode(row.tobytes()) for row in rows.cpu().numpy()])
        return table.to(language.device)[inverse]
