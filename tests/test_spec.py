"""Model specs: parsing, canonical form, secrets never in ids, shared client cache."""

from __future__ import annotations

import pytest

from rlmdistill.models.openai_client import OpenAIChatClient
from rlmdistill.models.spec import ModelSpec, close_all, get_client, open_client, parse_spec


def test_local_name_and_adapter() -> None:
    s = parse_spec("local:qwen2.5-coder-0.5b+adapter=adapters/run1")
    assert (s.kind, s.name, s.adapter, s.base_url) == (
        "local",
        "qwen2.5-coder-0.5b",
        "adapters/run1",
        None,
    )
    assert str(s) == "local:qwen2.5-coder-0.5b+adapter=adapters/run1"
    assert parse_spec(str(s)) == s


def test_local_checkpoint_dir_and_options() -> None:
    s = parse_spec("local:/data/ckpt/step-100+dtype=float32+ctx=4096")
    assert s.name == "/data/ckpt/step-100"
    assert s.dtype == "float32"
    assert s.context_window == 4096
    assert parse_spec(str(s)) == s


def test_int8_quant_is_part_of_the_model_id_and_round_trips() -> None:
    s = parse_spec("local:qwen2.5-coder-0.5b+quant=int8+adapter=runs/a")
    assert s.quant == "int8"
    assert s.adapter == "runs/a"
    assert s.model_id == "local:qwen2.5-coder-0.5b+adapter=runs/a+quant=int8"
    assert parse_spec(str(s)) == s
    assert parse_spec("local:qwen2.5-coder-0.5b").quant == "none"
    assert "quant" not in str(parse_spec("local:qwen2.5-coder-0.5b+quant=none"))


def test_openai_spec_with_org_model_name() -> None:
    s = parse_spec("openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1/")
    assert s.kind == "openai"
    assert s.name == "Qwen/Qwen2.5-7B-Instruct"
    assert s.base_url == "http://127.0.0.1:8000/v1"
    assert s.key_env == "RLMDISTILL_API_KEY"
    assert s.model_id == "openai:Qwen/Qwen2.5-7B-Instruct@http://127.0.0.1:8000/v1"


def test_key_never_in_model_id(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-very-secret-123"
    monkeypatch.setenv("MY_KEY", secret)
    s = parse_spec("openai:gpt-x@https://api.example.com/v1+key_env=MY_KEY")
    assert s.key_env == "MY_KEY"
    client = open_client(s)
    try:
        assert isinstance(client, OpenAIChatClient)
        assert secret not in client.model_id
        assert secret not in str(s) and secret not in repr(s) and secret not in repr(client)
        assert client._http.headers["Authorization"] == f"Bearer {secret}"  # the key is sent
    finally:
        client.close()


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("qwen", "must start with"),
        ("hf:qwen", "must start with"),
        ("local:", "expected local:NAME"),
        ("local:x+foo=1", "unknown option 'foo'"),
        ("local:x+adapter=a+adapter=b", "given twice"),
        ("local:x+dtype=int8", "+dtype"),
        ("local:x+ctx=abc", "+ctx must be an integer"),
        ("local:x+quant=int4", "+quant must be int8 or none"),
        ("local:x+dtype=bfloat16+quant=int8", "+quant=int8 runs float32 activations"),
        ("openai:gpt-4o", "openai:MODEL@BASE_URL"),
        ("openai:gpt-4o@api.openai.com/v1", "openai:MODEL@BASE_URL"),
        ("openai:@http://h/v1", "empty model name"),
        ("openai:m@http://user:pw@h/v1", "credentials"),
        ("openai:m@http://h/v1+key=sk-1", "secrets never go into a spec"),
        ("openai:m@http://h/v1+key_env=1BAD", "environment variable"),
        ("openai:m@http://h/v1+adapter=x", "unknown option 'adapter'"),
    ],
)
def test_bad_specs_raise_clear_value_error(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_spec(text)
    assert fragment in str(info.value)
    assert "sk-1" not in str(info.value)


def test_get_client_shares_instances_for_equal_specs() -> None:
    a = get_client("openai:m@http://127.0.0.1:9/v1")
    b = get_client(parse_spec("openai:m@http://127.0.0.1:9/v1/"))
    c = get_client("openai:other@http://127.0.0.1:9/v1")
    try:
        assert a is b
        assert a is not c
    finally:
        close_all()
    d = get_client("openai:m@http://127.0.0.1:9/v1")
    assert d is not a  # close_all forgot the old instance
    close_all()


def test_spec_is_hashable_and_frozen() -> None:
    s = parse_spec("local:smollm2-135m")
    assert {s: 1}[ModelSpec(kind="local", name="smollm2-135m")] == 1
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type
        s.name = "x"  # type: ignore[misc]


def test_unknown_local_name_mentions_pull() -> None:
    with pytest.raises(FileNotFoundError) as info:
        open_client("local:no-such-model")
    assert "rlmdistill models pull" in str(info.value)
    assert "qwen2.5-coder-0.5b" in str(info.value)
