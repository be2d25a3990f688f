"""The root client of online RL: the policy being trained, with token-exact multi-turn prompts.

:class:`PolicyChatClient` is a :class:`~rlmdistill.models.local.LocalChatClient` built around
the trainer's model (:meth:`~rlmdistill.models.local.LocalChatClient.from_model`: no second
copy, every turn samples from the current weights). It differs in one thing: the ids of a
prompt. The harness re-renders the whole conversation each turn, and re-tokenising the text of
an earlier reply does not always give the ids that were generated (SmolLM2: a generated
``" "`` + ``"\\n"`` came back as one ``" \\n"`` token), so the episode would have no single
token sequence and the loss would score ids the model never produced. Here, when a rendered
prompt starts with the text of an earlier request + its generated ids (decoded with special
tokens), the prompt ids are that request's prompt ids + generated ids + the ids of the rest
of the text only. Each turn then conditions on exactly the ids the policy sampled before
(token-in, token-out, as verl's and SkyRL's multi-turn rollouts do), and
:func:`rlmdistill.export.grpo.episode_token_row` joins the turns into one sequence.
"""

from __future__ import annotations

import threading
from typing import Any

from rlmdistill.models.base import ChatResult
from rlmdistill.models.local import LocalChatClient


class PolicyChatClient(LocalChatClient):
    """:class:`LocalChatClient` whose prompts extend earlier prompt + completion ids (module doc).

    Build it with :meth:`from_model`. ``reused_prefixes`` counts prompts that reused earlier
    ids; ``fresh_prompts`` those encoded from scratch (first turns, or text that does not extend
    an earlier request, e.g. a template that drops earlier reasoning).
    """

    def _start(self, context_window: int | None) -> None:
        self._served: list[tuple[str, list[int]]] = []
        self._texts: dict[tuple[int, ...], str] = {}
        self._served_lock = threading.Lock()
        self.reused_prefixes = 0
        self.fresh_prompts = 0
        super()._start(context_window)

    def _prompt_ids(self, text: str) -> list[int]:
        with self._served_lock:
            best: tuple[str, list[int]] | None = None
            for full_text, full_ids in self._served:
                if text.startswith(full_text) and (best is None or len(full_text) > len(best[0])):
                    best = (full_text, full_ids)
        if best is None:
            ids = self.encode(text)
            self.fresh_prompts += 1
        else:
            ids = best[1] + self.encode(text[len(best[0]) :])
            self.reused_prefixes += 1
        with self._served_lock:
            self._texts[tuple(ids)] = text
        return ids

    def _decode(
        self, gen: list[int], req: Any, done_at: float, logprobs: list[float] | None = None
    ) -> ChatResult:
        result = super()._decode(gen, req, done_at, logprobs)
        with self._served_lock:
            text = self._texts.get(tuple(req.prompt_ids))
        if text is not None and result.token_ids is not None:
            with self._tok_lock:
                tail = str(self.tokenizer.decode(result.token_ids, skip_special_tokens=False))
            with self._served_lock:
                self._served.append((text + tail, list(req.prompt_ids) + list(result.token_ids)))
        return result


__all__ = ["PolicyChatClient"]
