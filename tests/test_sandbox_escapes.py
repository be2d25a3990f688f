"""Deliberate escapes from the REPL, one per kind listed in issue 15, written as a model would
write them (the code of a ```repl block). Each runs under ``bwrap`` (refused) and ``audit``
(the outcome is recorded: :data:`AUDIT_STOPS` says which kinds the audit hook does not stop).

Most attempts first switch the audit hook off the way issue 15 found possible (the hook
function found through ``gc``, its bound defaults and closure changed), so that what stops them
under ``bwrap`` is the OS boundary, not the hook. Host-side effects are checked on the host.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import rlmdistill
from rlmdistill.harness.repl import ReplDied, ReplLimits, ReplProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bwrap is Linux-only")

MODES = ["bwrap", "audit"]

AUDIT_STOPS = {
    "hook_switched_off": False,
    "dir_fd_write": False,
    "task_json_read": False,
    "api_key_read": False,
    "collector_killed": False,
    "other_repl_stdin": False,
    "snapshot_overwrite": False,
    "outlives_repl": False,
    "outlives_collector": False,
    "fork_bomb": False,
    "scratch_flood": False,
}
"""What ``--sandbox audit`` stops of each escape kind (measured by the tests below; the README
section "Sandbox" quotes it). ``bwrap`` stops every one."""

UNHOOK = """\
import gc, types
class _Yes:
    def __init__(self, *a): pass
    def __eq__(self, other): return True
    def __hash__(self): return 0
for f in gc.get_objects():
    if isinstance(f, types.FunctionType) and f.__name__ == 'hook' \\
            and f.__code__.co_filename.endswith('repl_worker.py'):
        f.__defaults__ = (frozenset(), frozenset(), frozenset(), 0, _Yes, _Yes, f.__defaults__[-1])
        for cell in f.__closure__ or ():
            c = cell.cell_contents
            if isinstance(c, dict):
                c.clear()
            elif getattr(c, '__name__', '') == 'inside':
                c.__defaults__ = ('', '/')
"""


def no_llm(prompts, sources):
    raise AssertionError("no sub-calls expected")


def stopped(mode: str, kind: str) -> bool:
    """Whether ``mode`` is expected to stop escape ``kind``."""
    return mode == "bwrap" or AUDIT_STOPS[kind]


@pytest.fixture()
def snapshot(tmp_path):
    path = tmp_path / "snapcache" / "r.snapshot.json"
    path.parent.mkdir()
    docs = [{"id": "A/a.txt", "folder": "A", "text": "Any change of control lets Acme terminate."}]
    path.write_text(json.dumps({"room_id": "r", "documents": docs}))
    return path


def run(repl, code: str, timeout_s: float = 60):
    return repl.execute(code, no_llm, timeout_s=timeout_s)


def marker_pids(marker: str) -> list[int]:
    """Host processes whose command line contains ``marker``."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        pids.append(int(name))
            except OSError:
                pass
    return pids


def wait_gone(marker: str, polls: int = 400) -> list[int]:
    """Poll (every 25 ms, at most ``polls`` times) until no process carries ``marker``."""
    left = marker_pids(marker)
    for _ in range(polls):
        if not left:
            break
        time.sleep(0.025)
        left = marker_pids(marker)
    return left


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """``pid`` and every host process below it."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{name}/stat").read_text()
                parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out = [pid]
    for p in out:
        out += [c for c, pp in parents.items() if pp == p]
    return out


def daemon_code(marker: str) -> str:
    """A double fork into a new session whose grandchild execs ``sleep`` with ``marker``."""
    return UNHOOK + (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(300)', {marker!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\n"
        "import time\n"
        "for _ in range(400):\n"  # until the grandchild has exec'd (its cmdline has the marker)
        "    if any(\n"
        f"        {marker!r}.encode() in open(f'/proc/{{p}}/cmdline', 'rb').read()\n"
        "        for p in os.listdir('/proc') if p.isdigit() and os.path.exists(f'/proc/{p}/cmdline')\n"
        "    ):\n"
        "        break\n"
        "    time.sleep(0.025)\n"
        "print('daemon started')\n"
    )


# ----------------------------------------------------------------------------- file system
@pytest.mark.parametrize("mode", MODES)
def test_hook_switched_off_then_write_outside_scratch(mode, snapshot, tmp_path):
    target = tmp_path / "escaped.txt"
    with ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox=mode) as repl:
        out = run(
            repl,
            UNHOOK + f"open({str(target)!r}, 'w').write('pwned')\nprint('wrote')",
        )
    assert target.exists() is (not stopped(mode, "hook_switched_off"))
    if mode == "bwrap":  # the host folder is not even there
        assert "No such file or directory" in out.error, out


@pytest.mark.parametrize("mode", MODES)
def test_write_and_delete_through_dir_fd(mode, snapshot, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    code = (
        "import os\n"
        f"d = os.open({str(tmp_path)!r}, os.O_RDONLY)\n"
        "fd = os.open('escaped.txt', os.O_WRONLY | os.O_CREAT, dir_fd=d)\n"
        "os.write(fd, b'pwned')\n"
        "os.unlink('victim.txt', dir_fd=d)\n"
        "print('done')"
    )  # the audit hook is left on: it resolves 'escaped.txt' against the cwd, not d
    with ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox=mode) as repl:
        out = run(repl, code)
        if mode == "bwrap":  # the binds are read-only, hook or no hook (never tried on the host)
            ro = run(
                repl,
                UNHOOK + "import os\nd = os.open('/usr', os.O_RDONLY)\nos.mkdir('x', dir_fd=d)",
            )
            assert "Read-only file system" in ro.error, ro
    escaped = (tmp_path / "escaped.txt").exists() or not victim.exists()
    assert escaped is (not stopped(mode, "dir_fd_write")), out


# ----------------------------------------------------------------------------- the answer key
@pytest.mark.parametrize("mode", MODES)
def test_task_json_with_gold_evidence_is_out_of_reach(mode, snapshot, tmp_path):
    room = tmp_path / "room"
    room.mkdir()
    (room / "task.json").write_text(json.dumps({"evidence": "GOLD-EVIDENCE-7f3a"}))
    code = (
        "import os\n"
        "found = []\n"
        f"paths = [{str(room / 'task.json')!r}]\n"  # as learnt from /proc/<parent>/cmdline
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        args = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')\n"
        "    except OSError:\n"
        "        continue\n"
        "    paths += [os.path.join(a.decode(), 'task.json') for a in args if a.startswith(b'/')]\n"
        "for p in paths:\n"
        "    try:\n"
        "        found.append(open(p).read())\n"
        "    except OSError:\n"
        "        pass\n"
        "print('GOLD' in ''.join(found))"
    )
    with ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox=mode) as repl:
        out = run(repl, code)
    assert out.error is None, out.error
    assert out.stdout == f"{not stopped(mode, 'task_json_read')}\n"


COLLECTOR = """\
import json, sys, threading
from pathlib import Path
from rlmdistill.harness.repl import BackgroundRepl, ReplLimits
snap, scratch, mode, code = sys.argv[1:5]
repl = BackgroundRepl(Path(snap), Path(scratch), ReplLimits(), sandbox=mode)  # a worker thread
out = repl.execute(code, lambda p, s: ['x'] * len(p), timeout_s=60)
print(json.dumps({'stdout': out.stdout, 'error': out.error}), flush=True)
sys.stdin.readline()
repl.close()
print('collector done', flush=True)
"""


def start_collector(snapshot: Path, scratch: Path, mode: str, code: str, env: dict[str, str]):
    """A collector process (as ``rlmdistill collect`` would be) that runs ``code`` in a REPL it
    starts from a worker thread, prints the outcome, then waits for a line on stdin."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(Path(rlmdistill.__file__).parents[1]),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-c", COLLECTOR, str(snapshot), str(scratch), mode, code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


# ----------------------------------------------------------------------------- secrets
@pytest.mark.parametrize("mode", MODES)
def test_api_key_is_in_no_environment_the_repl_can_read(mode, snapshot, tmp_path):
    secret = f"sk-test-{uuid.uuid4().hex}"
    code = (
        "import os\n"
        "seen = [repr(dict(os.environ))]\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        seen.append(open(f'/proc/{pid}/environ', 'rb').read().decode('latin-1'))\n"
        "    except OSError:\n"
        "        pass\n"
        "print('sk-test-' in ''.join(seen))"
    )
    proc = start_collector(
        snapshot, tmp_path / "scratch", mode, code, {"RLMDISTILL_API_KEY": secret}
    )
    try:
        line = proc.stdout.readline()
    finally:
        proc.communicate("\n", timeout=60)
    out = json.loads(line)
    assert out["error"] is None, out
    assert out["stdout"] == f"{not stopped(mode, 'api_key_read')}\n"


# ----------------------------------------------------------------------------- the collector
@pytest.mark.parametrize("mode", MODES)
def test_collector_cannot_be_killed_with_pidfd_send_signal(mode, snapshot, tmp_path):
    code = (
        "import os, signal\n"
        "fd = os.pidfd_open(os.getppid())\n"
        "signal.pidfd_send_signal(fd, signal.SIGKILL)\n"
        "print('sent')"
    )
    proc = start_collector(snapshot, tmp_path / "scratch", mode, code, {})
    try:
        line = proc.stdout.readline()
        rest, _ = proc.communicate("\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    survived = proc.returncode == 0 and "collector done" in rest
    assert survived is stopped(mode, "collector_killed"), (line, rest, proc.returncode)
    if mode == "bwrap":  # pid 1 of the sandbox was hit: the REPL died, not the collector
        assert json.loads(line)["stdout"] in ("", "sent\n")


@pytest.mark.parametrize("mode", MODES)
def test_one_repl_cannot_write_into_another_repls_stdin(mode, snapshot, tmp_path):
    code = UNHOOK + (
        "import os, json\n"
        "hit = 0\n"
        "line = json.dumps({'op': 'exec', 'code': 'hijacked = 1'}) + '\\n'\n"
        "for pid in VICTIM_PIDS:\n"
        "    try:\n"
        "        d = os.open(f'/proc/{pid}/fd', os.O_RDONLY)\n"
        "        if os.stat('0', dir_fd=d).st_ino == os.fstat(0).st_ino:\n"
        "            continue\n"  # our own stdin (bwrap's pid 1 holds it too)
        "        fd = os.open('0', os.O_WRONLY, dir_fd=d)\n"
        "        os.write(fd, line.encode())\n"
        "        hit += 1\n"
        "    except OSError:\n"
        "        pass\n"
        "print(hit)"
    )
    with (
        ReplProcess(snapshot, tmp_path / "victim", ReplLimits(), sandbox=mode) as victim,
        ReplProcess(snapshot, tmp_path / "attacker", ReplLimits(), sandbox=mode) as attacker,
    ):
        run(victim, "mine = 1")
        # the attacker knows the victim's host pids (its worker, and bwrap's, which share its
        # stdin); scanning /proc would find them without a pid namespace
        out = run(attacker, code.replace("VICTIM_PIDS", repr(descendants(victim.pid))))
        try:
            after = run(victim, "print(mine, 'hijacked' in globals())")
            clean = after.stdout == "1 False\n"
        except ReplDied:  # the injected exec's reply broke the victim's protocol
            clean = False
    assert clean is stopped(mode, "other_repl_stdin"), out
    if mode == "bwrap":
        assert out.stdout == "0\n", out  # no victim pid exists in the attacker's namespace


# ----------------------------------------------------------------------------- the room cache
@pytest.mark.parametrize("mode", MODES)
def test_room_snapshot_cannot_be_overwritten(mode, snapshot, tmp_path):
    before = snapshot.read_bytes()
    code = UNHOOK + (
        "import os\n"
        f"for p in [{str(snapshot)!r}, '/room/' + {snapshot.name!r}]:\n"
        "    try:\n"
        '        open(p, \'w\').write(\'{"documents": [{"id": "A/a.txt", "folder": "A", "text": "POISON"}]}\')\n'
        "        print('overwrote', p)\n"
        "    except OSError as e:\n"
        "        print(type(e).__name__, e.strerror)"
    )
    with ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox=mode) as repl:
        out = run(repl, code)
    assert (snapshot.read_bytes() == before) is stopped(mode, "snapshot_overwrite"), out
    if mode == "bwrap":
        assert "Read-only file system" in out.stdout, out


# ----------------------------------------------------------------------------- processes
@pytest.mark.parametrize("mode", MODES)
def test_started_processes_die_with_the_repl(mode, snapshot, tmp_path):
    marker = f"rlmdistill-escape-{uuid.uuid4().hex}"
    with ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox=mode) as repl:
        out = run(repl, daemon_code(marker))
        assert out.stdout == "daemon started\n", out
        assert wait_gone(marker, polls=0) != []  # it runs now
    left = wait_gone(marker)
    kill_all(left)
    assert (left == []) is stopped(mode, "outlives_repl")


@pytest.mark.parametrize("mode", MODES)
def test_repl_started_from_a_thread_outlives_it_and_dies_with_the_collector(
    mode, snapshot, tmp_path
):
    """bubblewrap#692: --die-with-parent fires when the *thread* that started bwrap exits."""
    marker = f"rlmdistill-escape-{uuid.uuid4().hex}"
    proc = start_collector(snapshot, tmp_path / "scratch", mode, daemon_code(marker), {})
    try:
        out = json.loads(proc.stdout.readline())  # the starting thread has ended by now
        assert out["stdout"] == "daemon started\n", out
        assert marker_pids(marker) != []
        proc.kill()  # the collector dies without closing anything
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = wait_gone(marker)
    kill_all(left)
    assert (left == []) is stopped(mode, "outlives_collector")


def test_repl_outlives_the_thread_that_started_it(snapshot, tmp_path):
    made: list[ReplProcess] = []
    starter = threading.Thread(
        target=lambda: made.append(
            ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox="bwrap")
        )
    )
    starter.start()
    starter.join()
    (repl,) = made
    tid = starter.native_id
    for _ in range(400):  # until the OS thread itself is gone (PR_SET_PDEATHSIG fires then)
        if not os.path.exists(f"/proc/self/task/{tid}"):
            break
        time.sleep(0.025)
    assert not os.path.exists(f"/proc/self/task/{tid}")
    with repl:
        assert run(repl, "print(6 * 7)").stdout == "42\n"
        assert repl.alive


@pytest.mark.parametrize("mode", MODES)
def test_bounded_fork_bomb_hits_the_process_cap_and_the_collector_survives(
    mode, snapshot, tmp_path
):
    """max_processes=8 counts the worker itself: 7 forks succeed, the 8th fails (EAGAIN).
    As root (CI) the cap is the pids cgroup; otherwise RLIMIT_NPROC in the user namespace."""
    code = UNHOOK + (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(40):\n"  # bounded: at most 40 processes even without a cap
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(len(kids))"
    )
    with ReplProcess(
        snapshot, tmp_path / "scratch", ReplLimits(max_processes=8), sandbox=mode
    ) as repl:
        out = run(repl, code)
        assert out.error is None, out.error
        capped = out.stdout == "refused 11\n7\n"
        assert run(repl, "print('alive')").stdout == "alive\n"
    assert capped is stopped(mode, "fork_bomb"), out.stdout
    if not capped:  # audit: 40 sleeping children of a killed process group; reap them
        subprocess.run(["true"], check=True)
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout == b"1\n"


@pytest.mark.parametrize("mode", MODES)
def test_scratch_bytes_are_capped(mode, snapshot, tmp_path):
    """A 4 MiB tmpfs takes exactly four 1 MiB writes; the fifth fails with ENOSPC (28)."""
    code = (
        "n = 0\n"
        "try:\n"
        "    with open('fill.bin', 'wb') as fh:\n"
        "        for _ in range(8):\n"
        "            fh.write(b'x' * 2**20)\n"
        "            fh.flush()\n"
        "            n += 1\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "import os\n"
        "print(n, os.path.getsize('fill.bin'))"
    )
    with ReplProcess(
        snapshot, tmp_path / "scratch", ReplLimits(scratch_mb=4), sandbox=mode
    ) as repl:
        out = run(repl, code)
    capped = out.stdout == f"refused 28\n4 {4 * 2**20}\n"
    assert capped is stopped(mode, "scratch_flood"), out
    if not capped:
        assert out.stdout == f"8 {8 * 2**20}\n"


def test_bwrap_file_system_holds_only_the_binds_and_no_network(snapshot, tmp_path):
    """What the sandbox is: / holds the interpreter's binds, the worker, the room snapshot and
    /scratch; the environment is cleared; the network namespace is empty (even the host's
    loopback is out of reach once the audit hook is off)."""
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        code = UNHOOK + (
            "import os, socket\n"
            "print(sorted(os.listdir('/room')), os.listdir('/opt/rlmdistill'), os.getcwd())\n"
            "print(sorted(os.environ))\n"
            "print(os.path.exists('/etc'), os.path.exists('/home'), os.path.exists(os.path.expanduser('~/.cache/rlmdistill')))\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "    print('connected')\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)"
        )
        with ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(), sandbox="bwrap") as repl:
            out = run(repl, code)
    assert out.error is None, out.error
    lines = out.stdout.splitlines()
    assert lines[0] == "['r.snapshot.json'] ['repl_worker.py'] /scratch"
    remapped = not sys.base_prefix.startswith("/usr")  # libpython found at /opt/python/lib
    assert lines[1] == str(
        sorted(
            [
                *(["LD_LIBRARY_PATH"] if remapped else []),
                "GLIBC_TUNABLES",
                "HOME",
                "LANG",
                "MKL_NUM_THREADS",
                "OMP_NUM_THREADS",
                "OPENBLAS_NUM_THREADS",
                "PATH",
                "PWD",
                "TMPDIR",
            ]
        )
    )
    assert lines[2] == "False False False"
    assert lines[3] == "ConnectionRefusedError"


# ----------------------------------------------------------------------------- hardening
# Each test below failed on the profile before the hardening (root collector: the sandbox's
# uid 0 was the host's uid 0, / and /dev writable tmpfs, no seccomp, no memory cgroup, no
# freezer, leftovers kept 60 s). ``bwrap`` only: ``audit`` stops none of these.
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the root collector's profile")


def bwrap_repl(snapshot, tmp_path, **limits) -> ReplProcess:
    return ReplProcess(snapshot, tmp_path / "scratch", ReplLimits(**limits), sandbox="bwrap")


@needs_root
def test_no_file_under_proc_sys_opens_for_writing(snapshot, tmp_path):
    """Opening for writing is the step before a write; nothing is written either way."""
    code = UNHOOK + (
        "import os\n"
        "opened, tried = [], 0\n"
        "for d, _, files in os.walk('/proc/sys'):\n"
        "    for f in files:\n"
        "        tried += 1\n"
        "        try:\n"
        "            os.close(os.open(os.path.join(d, f), os.O_WRONLY))\n"
        "            opened.append(os.path.join(d, f))\n"
        "        except OSError:\n"
        "            pass\n"
        "print(tried > 100, opened[:5])"
    )
    with bwrap_repl(snapshot, tmp_path) as repl:
        out = run(repl, code)
    assert out.error is None, out.error
    assert out.stdout == "True []\n"


@needs_root
def test_dev_null_cannot_be_chmodded(snapshot, tmp_path):
    before = os.stat("/dev/null").st_mode
    code = UNHOOK + (  # the same mode: harmless on the host had it gone through
        f"import os\ntry:\n    os.chmod('/dev/null', {before & 0o7777})\n    print('changed')\n"
        "except OSError as e:\n    print(e.strerror)"
    )
    with bwrap_repl(snapshot, tmp_path) as repl:
        out = run(repl, code)
    assert out.stdout in ("Operation not permitted\n", "Read-only file system\n"), out
    assert os.stat("/dev/null").st_mode == before


def test_writing_a_gib_outside_scratch_fails_at_once(snapshot, tmp_path):
    """/ and /dev (so /dev/shm) are read-only: not a byte lands outside the scratch cap."""
    code = UNHOOK + (
        "import os\n"
        "chunk = b'x' * 2**26\n"
        "for path in ['/big', '/dev/shm/big', '/dev/big', '/opt/big', '/room/big']:\n"
        "    n = 0\n"
        "    try:\n"
        "        with open(path, 'wb') as fh:\n"
        "            for _ in range(16):\n"  # 16 x 64 MiB = 1 GiB
        "                fh.write(chunk)\n"
        "                fh.flush()\n"
        "                n += len(chunk)\n"
        "        err = None\n"
        "    except OSError as e:\n"
        "        err = e.errno\n"
        "    finally:\n"
        "        if os.path.exists(path):\n"
        "            os.unlink(path)\n"
        "    print(path, n, err)"
    )
    with bwrap_repl(snapshot, tmp_path) as repl:
        out = run(repl, code)
    assert out.error is None, out.error
    for line in out.stdout.splitlines():
        _path, n, err = line.split()
        assert n == "0" and err in ("30", "2", "13"), line  # EROFS / ENOENT / EACCES


def test_new_user_namespace_and_mount_are_refused(snapshot, tmp_path):
    code = UNHOOK + (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.unshare(0x10000000)\n"  # CLONE_NEWUSER
        "print('unshare', r, ctypes.get_errno())\n"
        "r = libc.mount(b'none', b'/scratch', b'tmpfs', 0, b'size=8g')\n"
        "print('mount', r, ctypes.get_errno())\n"
    )
    with bwrap_repl(snapshot, tmp_path) as repl:
        out = run(repl, code)
    assert out.error is None, out.error
    assert out.stdout == "unshare -1 1\nmount -1 1\n"  # EPERM both


@needs_root
def test_three_children_are_stopped_by_the_repl_memory_cap(snapshot, tmp_path):
    """Each child stays under its own RLIMIT_AS (memory_limit_mb); together they pass the
    REPL's memory cgroup (memory_limit_mb + scratch_mb = 528 MiB): the kernel kills inside
    the REPL, the collector (this process) lives on."""
    code = UNHOOK + (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(3):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        block = b'\\x01' * (300 * 2**20)\n"  # touched pages: 300 MiB resident
        "        time.sleep(3)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(sorted(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in kids))"
    )
    with bwrap_repl(snapshot, tmp_path, memory_limit_mb=512, scratch_mb=16) as repl:
        assert "memory" not in getattr(repl, "notes", {}), repl.notes
        out = run(repl, code)
        events = getattr(repl._cgroup, "memory_events", dict)()
    assert out.error is None, out.error
    codes = eval(out.stdout)  # a list of ints printed by the block
    assert -signal.SIGKILL in codes, codes  # at least one child was OOM-killed
    assert events.get("oom_kill", 0) >= 1, events
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True).stdout == b"1\n"


@needs_root
def test_a_background_thread_does_not_run_between_blocks(snapshot, tmp_path):
    start = UNHOOK + (
        "import threading, time\n"
        "ticks = []\n"
        "def spin():\n"
        "    while True:\n"
        "        ticks.append(time.monotonic())\n"
        "        time.sleep(0.002)\n"
        "threading.Thread(target=spin, daemon=True).start()\n"
        "time.sleep(0.05)\n"
        "end_of_block = time.monotonic()"
    )
    count = (
        "now = time.monotonic()\n"
        "print(len([t for t in ticks if end_of_block + 0.3 < t < now - 0.3]))"
    )
    with bwrap_repl(snapshot, tmp_path) as repl:
        run(repl, start)
        assert getattr(repl, "frozen_between_blocks", True)
        time.sleep(1.5)  # the model thinks
        out = run(repl, count)
        assert out.error is None, out.error
        assert out.stdout == "0\n", out  # ~450 ticks in that window when it ran
        again = run(
            repl,
            "t0 = time.monotonic()\ntime.sleep(0.3)\nprint(len([t for t in ticks if t > t0]) > 10)",
        )
    assert again.stdout == "True\n"  # it runs while a block runs


KILLED_COLLECTOR = """\
import json, sys, tempfile
from pathlib import Path
from rlmdistill.harness.repl import BackgroundRepl, ReplLimits
from rlmdistill.harness.sandbox import scratch_parent
snap = sys.argv[1]
scratch = Path(tempfile.mkdtemp(prefix='ep-', dir=scratch_parent()))
repl = BackgroundRepl(Path(snap), scratch, ReplLimits(), sandbox='bwrap')
out = repl.execute(sys.argv[2], lambda p, s: ['x'] * len(p), timeout_s=60)
print(json.dumps({'stdout': out.stdout, 'scratch': str(scratch)}), flush=True)
sys.stdin.readline()
"""


def _owned_by(pid: int) -> list[Path]:
    """cgroup folders and temp folders named after collector ``pid``."""
    from rlmdistill.harness import cgroups

    h = cgroups.hierarchies()
    bases = {*h.v1.values(), *([h.v2] if h.v2 else []), Path(tempfile.gettempdir())}
    return [
        e
        for b in bases
        if b.is_dir()
        for e in b.iterdir()
        if (cgroups.parse_owned(e.name) or (0, 0))[0] == pid
    ]


@needs_root
def test_nothing_is_left_after_the_collector_is_killed(snapshot, tmp_path):
    """SIGKILL while the REPL is frozen between blocks: its processes die (cgroup2 freezer lets
    SIGKILL through), and the next collector's first REPL removes the cgroups and the scratch
    folders named after the dead one."""
    marker = f"rlmdistill-escape-{uuid.uuid4().hex}"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(Path(rlmdistill.__file__).parents[1])}  # fmt: skip
    procs = []
    for code in (daemon_code(marker), "print('second')"):
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", KILLED_COLLECTOR, str(snapshot), code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
        out = json.loads(procs[-1].stdout.readline())
        if len(procs) == 1:
            assert out["stdout"] == "daemon started\n", out
            first = procs[0]
            assert _owned_by(first.pid) != []  # its cgroups and scratch folders exist
            first.kill()
            first.wait(timeout=30)
            left = wait_gone(marker)
            kill_all(left)
            assert left == []
    second = procs[1]
    try:
        assert out["stdout"] == "second\n"
        assert _owned_by(first.pid) == []
    finally:
        second.communicate("\n", timeout=60)


def test_capabilities_uid_and_namespaces(snapshot, tmp_path):
    """No capability in any set, not the host's uid 0, and ipc, uts, net, pid, mount and
    cgroup namespaces of its own (compared with the collector's)."""
    kinds = ["ipc", "uts", "net", "pid", "mnt", "cgroup"]
    code = UNHOOK + (
        "import os, socket\n"
        "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
        "print([st[k] for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')], st['NoNewPrivs'])\n"
        "print(os.getuid(), socket.gethostname())\n"
        f"print([os.readlink('/proc/self/ns/' + k) for k in {kinds!r}])"
    )
    with bwrap_repl(snapshot, tmp_path) as repl:
        out = run(repl, code)
    assert out.error is None, out.error
    caps, ids, ns = out.stdout.splitlines()
    assert caps == str(["0000000000000000"] * 5) + " 1"
    uid, host = ids.split()
    assert host == "sandbox"
    if os.geteuid() == 0:
        assert uid == "65534"
    mine = [os.readlink(f"/proc/self/ns/{k}") for k in kinds]
    assert all(a != b for a, b in zip(eval(ns), mine, strict=True)), (ns, mine)
