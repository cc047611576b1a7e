"""Token-in/token-out multi-turn encoding: the model's own reply tokens are kept as sampled, and each
environment message is tokenized once, never re-rendered from text.

    chat = ChatEncoder(tokenizer)
    ids = chat.encode_prompt(messages)          # the opening messages + the generation prompt
    ids += reply                                # the model's tokens, ending at its end-of-turn token
    ids += chat.encode_followup(new_messages)   # glue after end-of-turn + the new messages + generation prompt
                                                # (a reply cut at max_new_tokens: append chat.end_of_turn first)
    ...                                         # decode(ids) == the chat template's rendering of it all

The glue is read off the chat template itself, as veRL's tool agent loop does: the
template renders a stand-in conversation ending with an assistant turn, once alone
and once with the new messages and the generation prompt after it; the second
rendering minus the first is what the new messages add. What the template writes
after the assistant's content and its end-of-turn token (ChatML's newline after
`<|im_end|>`) comes first. No template format is written down here.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

Message = dict[str, str]

# stand-ins for the conversation so far; the marker has no whitespace, so templates that strip content keep it
_MARKER = "EMBODIEDREPLYMARKER"
_BASE: list[Message] = [{"role": "user", "content": "EMBODIEDUSERMARKER"}, {"role": "assistant", "content": _MARKER}]


class ChatEncoder:
    """Chat-template encoding for a tokenizer with a `chat_template`; `stop_ids` are the end-of-turn tokens
    generation stops at (the tokenizer's EOS and the model's generation-config EOS ids)."""

    def __init__(self, tokenizer, stop_ids: Sequence[int] = ()):
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no chat_template: multi-turn encoding needs "
                             "one (set tokenizer.chat_template, or use an instruct model's directory)")
        self.tokenizer = tokenizer
        ids = [*stop_ids] + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])
        self.stop_ids = tuple(dict.fromkeys(ids))
        if not self.stop_ids:
            raise ValueError(f"tokenizer {tokenizer.name_or_path!r} has no EOS token and no stop ids were given")

    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        # no BOS/EOS added: templates that want a BOS write it themselves (Llama 3's <|begin_of_text|>)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_prompt(self, messages: Sequence[Message]) -> list[int]:
        """The opening messages rendered by the chat template, with the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def encode_followup(self, messages: Sequence[Message]) -> list[int]:
        """Tokens to append after the model's reply (which ends at a stop token, as generated): the template's text
        after that token, the new messages, then the generation prompt."""
        if not messages:
            raise ValueError("encode_followup needs at least one new message")
        return self.encode(self.followup_text(messages))

    def followup_text(self, messages: Sequence[Message]) -> str:
        base = self._base
        full = self.render([*_BASE, *messages], add_generation_prompt=True)
        if not full.startswith(base):
            raise ValueError("the chat template renders earlier turns differently once messages follow them, so a "
                             "conversation cannot be extended token by token (token-in/token-out)")
        return self._turn_end(base)[1] + full[len(base):]

    @property
    def end_of_turn(self) -> int:
        """The stop token the template closes an assistant turn with: a reply cut at max_new_tokens gets it appended
        (as a non-model token) before `encode_followup`, so the sequence stays the template's rendering."""
        stop = self._turn_end(self._base)[0]
        return self.tokenizer.convert_tokens_to_ids(stop)

    @functools.cached_property
    def _base(self) -> str:
        return self.render(_BASE, add_generation_prompt=False)

    def _turn_end(self, base: str) -> tuple[str, str]:
        """(stop token text, the template's text after it) at the end of the stand-in assistant turn."""
        after_reply = base[base.rindex(_MARKER) + len(_MARKER):]
        stops = [self.tokenizer.convert_ids_to_tokens(i) for i in self.stop_ids]
        found = [(after_reply.find(s), s) for s in stops if s and s in after_reply]
        if not found:
            raise ValueError(f"the chat template closes an assistant turn with {after_reply!r}, which holds none of "
                             f"the stop tokens {stops}: a reply ending at its stop token cannot be continued")
        at, stop = min(found)
        return stop, after_reply[at + len(stop):]
