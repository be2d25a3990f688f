"""Compatibility shims for the libraries we build on (warnings they raise on our behalf)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["library_warning_filter"]


@contextmanager
def library_warning_filter() -> Iterator[None]:
    """Silence, inside the block, exactly the FutureWarnings that libraries raise on our
    behalf and that we cannot fix by calling a newer API ourselves:

    - ``is_gradient_checkpointing is deprecated ... Use is_activation_checkpointing``
      (``FutureWarning`` from ``transformers.modeling_utils``, transformers 5.x): raised when
      peft 0.21's ``PeftModel.__init__`` reads ``getattr(model, "is_gradient_checkpointing",
      True)`` (``peft/peft_model.py``), i.e. in every ``get_peft_model`` (TRL's
      ``SFTTrainer``) and ``PeftModel.from_pretrained`` (merge).

    Other warnings pass unchanged.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`is_gradient_checkpointing` is deprecated",
            category=FutureWarning,
            module=r"transformers\.modeling_utils",
        )
        yield
