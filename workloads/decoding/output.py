"""The growing output of one decode and the rules that end it."""

from __future__ import annotations

from transformers import PreTrainedTokenizerBase


class Output:
    """Emitted token ids; `extend` truncates at EOS, a stop string or max_new_tokens."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, max_new_tokens: int, stop: tuple[str, ...]):
        self.tokenizer, self.max_new_tokens, self.stop = tokenizer, max_new_tokens, stop
        self.eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        self.ids: list[int] = []
        self.stop_reason: str | None = None

    @property
    def remaining(self) -> int:
        return self.max_new_tokens - len(self.ids)

    def extend(self, tokens: list[int]) -> bool:
        """Append emitted tokens; True once the decode is over."""
        for token in tokens[: self.remaining]:
            self.ids.append(token)
            if token in self.eos:
                self.stop_reason = "eos"
                return True
        if self.stop and self.cut_at_stop_string():
            self.stop_reason = "stop"
            return True
        if self.remaining <= 0:
            self.stop_reason = "length"
            return True
        return False

    def cut_at_stop_string(self) -> bool:
        text = self.tokenizer.decode(self.ids)
        if not any(s in text for s in self.stop):
            return False
        # keep the fewest tokens whose text contains a stop string
        for n in range(1, len(self.ids) + 1):
            if any(s in self.tokenizer.decode(self.ids[:n]) for s in self.stop):
                del self.ids[n:]
                return True
        return True

    def text(self) -> str:
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        for s in self.stop:
            if self.stop_reason == "stop" and s in text:
                text = text[: text.index(s) + len(s)]
        return text
