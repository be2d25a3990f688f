"""The collector's glibc heap settings (heap.py)."""

from __future__ import annotations

import os

import pytest

from rlmdistill import heap


class _FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def test_limit_arenas_sets_m_arena_max(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMDISTILL_MALLOC_ARENAS", raising=False)
    fake = _FakeLibc()
    monkeypatch.setattr(heap, "libc", lambda: fake)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    heap.limit_arenas()
    heap.limit_arenas(5)
    assert fake.calls == [(-8, 3), (-8, 5)]  # M_ARENA_MAX is -8 in glibc's malloc.h


def test_arena_cap_is_at_least_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLMDISTILL_MALLOC_ARENAS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert heap.arena_cap() == 2


def test_limit_arenas_outside_glibc_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "libc", lambda: None)
    heap.limit_arenas()  # no AttributeError


def test_real_mallopt_accepts_the_cap() -> None:
    lib = heap.libc()
    if lib is None or not hasattr(lib, "mallopt"):
        pytest.skip("no glibc")
    assert lib.mallopt(-8, heap.arena_cap()) == 1  # glibc returns 1 on success


def test_arena_cap_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeLibc()
    monkeypatch.setattr(heap, "libc", lambda: fake)
    monkeypatch.setenv("RLMDISTILL_MALLOC_ARENAS", "6")
    assert heap.arena_cap() == 6
    monkeypatch.setenv("RLMDISTILL_MALLOC_ARENAS", "0")  # glibc's default: no mallopt call
    heap.limit_arenas()
    assert fake.calls == []
    monkeypatch.setenv("RLMDISTILL_MALLOC_ARENAS", "many")
    with pytest.raises(ValueError, match="RLMDISTILL_MALLOC_ARENAS='many'"):
        heap.arena_cap()
