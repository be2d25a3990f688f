"""Admission control (collect/admission.py) and REPL starts short of resources."""

from __future__ import annotations

import errno
import resource
import threading
import time

import pytest

from rlmdistill.collect import admission
from rlmdistill.collect.admission import Gate, capacity
from rlmdistill.harness import repl
from rlmdistill.harness.repl import ReplDied, ReplLimits, start_patiently


def test_capacity_is_the_scarcest_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {resource.RLIMIT_NOFILE: (1000, 1000), resource.RLIMIT_NPROC: (2000, 2000)}
    monkeypatch.setattr(admission.resource, "getrlimit", lambda which: limits[which])
    monkeypatch.setattr(admission.resource, "setrlimit", lambda *a: None)
    monkeypatch.setattr(admission, "_open_fds", lambda: 104)
    monkeypatch.setattr(admission, "_pids_max", lambda: None)

    class Proc:
        def num_threads(self) -> int:
            return 44

    class Mem:
        available = (1024 + 48 * 30) * 2**20  # the reserve + 30 REPLs

    monkeypatch.setattr(admission.psutil, "Process", Proc)
    monkeypatch.setattr(admission.psutil, "virtual_memory", lambda: Mem())
    cap = capacity(fds_per_episode=8)
    # (1000 - 104 - 256) // (8 + 8) = 40; (2000 - 44 - 256) // 4 = 425 (or less with
    # threads-max); 30 by memory
    assert (cap.descriptors, cap.memory, cap.episodes, cap.bound) == (40, 30, 30, "memory")
    assert capacity(fds_per_episode=56).descriptors == (1000 - 104 - 256) // 64
    assert capacity(fds_per_episode=8, extra_repls=5).memory == 25


def test_gate_admits_one_when_memory_is_short_and_the_next_waits_its_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Gate, "_memory_ok", staticmethod(lambda: False))
    gate = Gate()
    order: list[str] = []
    first_in = threading.Event()
    release = threading.Event()

    def first() -> None:
        with gate.admit():
            order.append("first in")
            first_in.set()
            release.wait(30)
            order.append("first out")

    def second() -> None:
        with gate.admit():
            order.append("second in")

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_in.wait(30)  # nothing was running: admitted although memory is short
    t2 = threading.Thread(target=second)
    t2.start()
    time.sleep(0.2)
    assert order == ["first in"]  # waits while the first runs
    release.set()
    t1.join(30)
    t2.join(30)
    assert order == ["first in", "first out", "second in"]
    assert gate.waits == 1 and gate.running == 0


def test_a_repl_start_short_of_descriptors_waits_and_tries_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    calls: list[int] = []

    class Flaky:
        def __init__(self, *args, **kwargs) -> None:
            calls.append(1)
            if len(calls) < 3:
                raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(repl, "ReplProcess", Flaky)
    limits = ReplLimits(startup_timeout_s=30)
    assert isinstance(start_patiently(tmp_path / "s.json", tmp_path, limits), Flaky)
    assert len(calls) == 3

    class Never:
        def __init__(self, *args, **kwargs) -> None:
            raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(repl, "ReplProcess", Never)
    with pytest.raises(ReplDied, match="still short of resources"):
        start_patiently(tmp_path / "s.json", tmp_path, ReplLimits(startup_timeout_s=0.1))

    class Other:
        def __init__(self, *args, **kwargs) -> None:
            raise OSError(errno.ENOENT, "No such file")

    monkeypatch.setattr(repl, "ReplProcess", Other)
    with pytest.raises(OSError, match="No such file"):
        start_patiently(tmp_path / "s.json", tmp_path, limits)
