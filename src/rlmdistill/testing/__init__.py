"""Test helpers shipped with the package: a scripted OpenAI-compatible loopback server."""

from rlmdistill.testing.fake_openai import (
    FakeOpenAIServer,
    FakeReply,
    ScriptedHandler,
    echo_handler,
    fail_first,
    fail_if,
)

__all__ = [
    "FakeOpenAIServer",
    "FakeReply",
    "ScriptedHandler",
    "echo_handler",
    "fail_first",
    "fail_if",
]
