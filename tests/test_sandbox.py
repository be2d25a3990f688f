"""The audit hook (`--sandbox audit`, and the first line inside bwrap): writes only inside
scratch, no sockets, no new processes, state survives.

The audit hook is a guard against a weak model's mistakes, not a security boundary (see the
docstring of ``rlmdistill.harness.repl_worker``).
"""

import json
import socket

import pytest

from rlmdistill.harness.repl import ReplLimits, ReplProcess


def no_llm(prompts, sources):
    raise AssertionError("no sub-calls expected")


@pytest.fixture()
def snapshot(tmp_path):
    path = tmp_path / "snap.json"
    docs = [{"id": "A/a.txt", "folder": "A", "text": "Any change of control lets Acme terminate."}]
    path.write_text(json.dumps({"room_id": "r", "room_hash": "h", "documents": docs}))
    return path


@pytest.fixture()
def scratch(tmp_path):
    return tmp_path / "scratch"


@pytest.fixture()
def repl(snapshot, scratch):
    with ReplProcess(snapshot, scratch, ReplLimits(max_file_mb=1), sandbox="audit") as r:
        yield r


def run(repl, code):
    out = repl.execute(code, no_llm, timeout_s=30)
    assert repl.alive
    return out


def assert_refused(out, words):
    assert out.error is not None, out
    assert "PermissionError: rlmdistill sandbox:" in out.error, out.error
    assert words in out.error, out.error


def test_writing_inside_scratch_works(repl, scratch):
    out = run(
        repl,
        "import os, tempfile\n"
        "open('notes.txt', 'w').write('hello')\n"
        "os.makedirs('sub/deeper', exist_ok=True)\n"
        "open('sub/deeper/x.json', 'a').write('{}')\n"
        "os.rename('notes.txt', 'sub/notes.txt')\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as fh:\n"
        "    fh.write('t')\n"
        "print(os.path.dirname(fh.name) == os.getcwd(), open('sub/notes.txt').read())",
    )
    assert out.error is None, out.error
    assert out.stdout == "True hello\n"
    assert (scratch / "sub" / "notes.txt").read_text() == "hello"


def test_writing_outside_scratch_is_refused_and_nothing_is_written(repl, tmp_path):
    target = tmp_path / "outside.txt"
    out = run(repl, f"x = 41\nopen({str(target)!r}, 'w').write('bad')")
    assert_refused(out, f"writing outside the scratch folder is not allowed: {target}")
    assert not target.exists()
    # every way in refuses too: os.open, relative escape, rename out, mkdir, remove, symlink
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    for code in (
        f"import os; os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)",
        "open('../outside.txt', 'x')",
        f"open('mine.txt', 'w').close(); import os; os.rename('mine.txt', {str(target)!r})",
        f"import os; os.mkdir({str(tmp_path / 'newdir')!r})",
        f"import os; os.remove({str(victim)!r})",
        f"import shutil; shutil.rmtree({str(tmp_path)!r})",
        f"import os; os.truncate({str(victim)!r}, 0)",
        f"import os; os.chmod({str(victim)!r}, 0o777)",
        f"import os; os.symlink({str(victim)!r}, 'link.txt')",
    ):
        assert_refused(run(repl, code), "writing outside the scratch folder is not allowed")
    assert not target.exists()
    assert not (tmp_path / "newdir").exists()
    assert victim.read_text() == "keep"
    # state survives the refusals
    assert run(repl, "print(x + 1)").stdout == "42\n"


def test_reading_outside_scratch_still_works(repl, tmp_path):
    outside = tmp_path / "readme.txt"
    outside.write_text("readable")
    out = run(repl, f"print(open({str(outside)!r}).read())")
    assert out.error is None, out.error
    assert out.stdout == "readable\n"


def test_dev_null_is_writable(repl):
    out = run(repl, "open('/dev/null', 'w').write('x'); print('ok')")
    assert out.error is None, out.error


def test_network_is_refused(repl):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        out = run(repl, f"n = 7\nimport socket\nsocket.create_connection(('127.0.0.1', {port}))")
    assert_refused(out, "network access is not allowed")
    out = run(repl, "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/')")
    assert_refused(out, "network access is not allowed")
    assert run(repl, "print(n)").stdout == "7\n"


def test_new_processes_are_refused(repl):
    run(repl, "state = [1, 2]")
    for code in (
        "import subprocess; subprocess.run(['true'])",
        "import os; os.system('true')",
        "import os; os.execv('/bin/true', ['true'])",
        "import os; os.fork()",
        "import os; os.posix_spawn('/bin/true', ['true'], {})",
        "import os; os.popen('true').read()",
    ):
        assert_refused(run(repl, code), "starting processes is not allowed")
    assert run(repl, "print(state)").stdout == "[1, 2]\n"


def test_ctypes_and_signals_to_others_are_refused(repl):
    assert_refused(run(repl, "import ctypes; ctypes.CDLL('libc.so.6')"), "ctypes")
    assert_refused(run(repl, "import ctypes; ctypes.pythonapi.Py_IsInitialized"), "ctypes")
    assert_refused(run(repl, "import os; os.kill(os.getppid(), 0)"), "signalling")


def test_stdlib_imports_and_room_helpers_work_after_the_hook(repl):
    out = run(
        repl,
        "import json, re, collections, math, statistics, itertools, textwrap, datetime\n"
        "import csv, io, functools, string, difflib, hashlib, random, decimal, fractions\n"
        "print(statistics.mean([1, 2, 3]), len(search('change of control')), "
        "read('A/a.txt', 0, 3), json.dumps(sorted(room)))",
    )
    assert out.error is None, out.error
    assert out.stdout == '2 1 Any ["A/a.txt"]\n'


def test_file_size_is_capped_in_scratch(repl):
    out = run(repl, "open('big.bin', 'wb').write(b'x' * (2 * 2**20))")
    assert out.error is not None
    assert "File too large" in out.error
    assert run(repl, "print('alive')").stdout == "alive\n"


def test_sandbox_can_be_switched_off(snapshot, scratch, tmp_path):
    target = tmp_path / "allowed.txt"
    with ReplProcess(snapshot, scratch, ReplLimits(sandbox=False), sandbox="audit") as r:
        out = r.execute(f"open({str(target)!r}, 'w').write('ok')", no_llm, timeout_s=30)
    assert out.error is None, out.error
    assert target.read_text() == "ok"
