"""``rlmdistill submit`` (Ray Jobs) and the workspace's job records.

Fast tests (no cluster): the record format (old records load as local jobs, a Ray job's
state from its files, a refresh from a stand-in cluster), the Jobs address, the entrypoint
and runtime_env, and the command's argument handling.

The slow test starts a real Ray head with its dashboard on 127.0.0.1 (``ray start --head``
in a temporary folder, every port chosen free), submits ``rlmdistill sft`` on the tiny
random Llama of ``tests/test_sft.py`` through ``rlmdistill submit``, checks the job record and
its log, lists it on the dashboard's SFT page (AppTest), then submits a long job and stops
it. The head is stopped by its process group, not ``ray stop``: ``ray stop`` ends every Ray
process on the machine, other users' too (../shared/RECIPES-turn3.md section 1). Needs the
``ray`` extra (``ray[default]``: the dashboard and its job server); skipped without it unless
``RLMDISTILL_REQUIRE_RAY=1`` (CI).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rlmdistill.cli import app
from rlmdistill.cluster import jobs as ray_jobs
from rlmdistill.cluster.cli import SubmitOptions, out_dir_of, submit_main
from rlmdistill.dashboard import jobs

runner = CliRunner()


# ------------------------------------------------------------------ record format (fast)
def _local_record(ws: Path, name: str = "old") -> Path:
    """A record as the dashboard wrote it before ``where`` existed (pid of a process that is
    gone, exit status 0 written)."""
    folder = jobs.jobs_dir(ws)
    folder.mkdir(parents=True)
    (folder / f"{name}.rc").write_text("0\n")
    record = {
        "name": name,
        "command": [sys.executable, "-m", "rlmdistill.sft", "--out", "adapters/a"],
        "cwd": str(ws),
        "pid": 2**22 + 1,
        "started_at": "2026-12-01T10:00:00Z",
        "log": str(folder / f"{name}.log"),
        "rc_file": str(folder / f"{name}.rc"),
        "out_dir": "adapters/a",
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(record))
    return path


def test_record_written_before_where_loads_as_a_local_job(tmp_path: Path) -> None:
    _local_record(tmp_path)
    (job,) = jobs.list_jobs(tmp_path)
    assert (job.where, job.remote, job.ray_job_id, job.files) == ("local", False, None, None)
    assert jobs.job_state(job) == ("succeeded", 0)
    assert jobs.refresh(job) == "succeeded"  # no request for a local job
    with pytest.raises(jobs.JobError, match="runs on this machine"):
        jobs.stop_job(job)


def _remote_record(ws: Path, name: str = "r1", status: str | None = "RUNNING") -> jobs.JobRecord:
    folder = jobs.jobs_dir(ws)
    folder.mkdir(parents=True, exist_ok=True)
    job = jobs.JobRecord(
        name=name,
        command=["python", "-m", "rlmdistill.cli", "sft", "--out", "adapters/r"],
        cwd=str(ws),
        started_at=dt.datetime(2026, 12, 5, 8, 0, tzinfo=dt.UTC),
        log=str(folder / f"{name}.log"),
        rc_file=str(folder / f"{name}.rc"),
        out_dir="adapters/r",
        where="http://127.0.0.1:8265",
        ray_job_id=f"{name}-0123abcd",
        files="shared",
    )
    (folder / f"{name}.json").write_text(job.model_dump_json())
    if status is not None:
        st = jobs.RemoteStatus(status=status, synced_at=dt.datetime.now(dt.UTC))
        (folder / f"{name}.ray.json").write_text(st.model_dump_json())
    return job


@pytest.mark.parametrize(
    ("status", "state"),
    [("PENDING", "pending"), ("RUNNING", "running"), ("SUCCEEDED", "succeeded"),
     ("FAILED", "failed"), ("STOPPED", "stopped"), ("LOST", "lost"), (None, "unknown")],
)  # fmt: skip
def test_ray_job_state_comes_from_its_status_file(tmp_path: Path, status: str, state: str) -> None:
    job = _remote_record(tmp_path, status=status)
    (loaded,) = jobs.list_jobs(tmp_path)
    assert loaded == job and loaded.remote
    assert jobs.job_state(loaded) == (state, None)


def test_refresh_copies_status_log_and_exit_status_from_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in cluster answers RUNNING, then FAILED with exit status 2: each refresh writes
    the log and the status; the final one the ``.rc`` file; after that no request is made."""
    job = _remote_record(tmp_path, status="PENDING")
    answers = [
        (ray_jobs.JobInfo("RUNNING", "Job is running.", None, 1, None), "step 1\n"),
        (ray_jobs.JobInfo("FAILED", "exit 2", 2, 1, 9), "step 1\nerror: bad dataset\n"),
    ]
    asked: list[str] = []

    def info(address: str, job_id: str) -> ray_jobs.JobInfo:
        asked.append(job_id)
        return answers[0][0]

    def logs(address: str, job_id: str) -> str:
        return answers.pop(0)[1]

    monkeypatch.setattr(ray_jobs, "job_info", info)
    monkeypatch.setattr(ray_jobs, "job_logs", logs)
    assert jobs.refresh(job) == "running"
    assert jobs.read_log(job) == "step 1\n" and not Path(job.rc_file).exists()
    assert jobs.refresh(job) == "failed"
    assert jobs.job_state(job) == ("failed", 2)
    assert Path(job.rc_file).read_text() == "2\n"
    assert jobs.read_log(job).endswith("error: bad dataset\n")
    assert jobs.read_remote_status(job).message == "exit 2"  # type: ignore[union-attr]
    assert jobs.refresh(job) == "failed" and asked == ["r1-0123abcd"] * 2


def test_refresh_keeps_the_files_when_the_cluster_is_away_and_marks_a_forgotten_job_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _remote_record(tmp_path, status="RUNNING")
    errors = [
        ray_jobs.RayJobsError("ray address http://127.0.0.1:8265: nothing answers"),
        ray_jobs.RayJobsError("ray job r1-0123abcd at http://127.0.0.1:8265: Job does not exist"),
    ]

    def info(address: str, job_id: str) -> ray_jobs.JobInfo:
        raise errors.pop(0)

    monkeypatch.setattr(ray_jobs, "job_info", info)
    assert jobs.refresh(job) == "running"  # unchanged
    assert jobs.refresh(job) == "lost"
    assert jobs.job_state(job) == ("lost", None)


def test_a_pending_ray_job_of_the_same_name_blocks_a_new_one(tmp_path: Path) -> None:
    _remote_record(tmp_path, status="PENDING")
    with pytest.raises(jobs.JobError, match=r"still running \(Ray job r1-0123abcd at http"):
        jobs.submit_remote(tmp_path, "r1", "http://127.0.0.1:9", ["sft"])
    with pytest.raises(jobs.JobError, match="job name"):
        jobs.submit_remote(tmp_path, "../x", "http://127.0.0.1:9", ["sft"])
    assert jobs.find_job(tmp_path, "r1-0123abcd").name == "r1"
    with pytest.raises(jobs.JobError, match="no job 'r2' in"):
        jobs.find_job(tmp_path, "r2")


# ------------------------------------------------------------------ addresses, entrypoint (fast)
@pytest.mark.parametrize(
    ("given", "url"),
    [("127.0.0.1", "http://127.0.0.1:8265"), ("head:9000", "http://head:9000"),
     ("http://10.0.0.5", "http://10.0.0.5:8265"), ("https://h.example:443/", "https://h.example:443"),
     ("http://[::1]:8265", "http://[::1]:8265")],
)  # fmt: skip
def test_jobs_address_defaults_scheme_and_port(given: str, url: str) -> None:
    assert ray_jobs.jobs_address(given) == url


def test_jobs_address_refuses_ray_client_and_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    with pytest.raises(ray_jobs.RayJobsError, match="no Ray Jobs address"):
        ray_jobs.jobs_address(None)
    with pytest.raises(ray_jobs.RayJobsError, match="head's dashboard"):
        ray_jobs.jobs_address("ray://head:10001")
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", "http://127.0.0.1:8266")
    assert ray_jobs.jobs_address(None) == "http://127.0.0.1:8266"


def test_entrypoint_quotes_every_word_and_changes_into_a_shared_workspace() -> None:
    args = ["sft", "--dataset", "datasets/my set", "--out", "adapters/a"]
    assert ray_jobs.entrypoint(args) == (
        "python -m rlmdistill.cli sft --dataset 'datasets/my set' --out adapters/a"
    )
    assert ray_jobs.entrypoint(["rl", "x.yaml"], python="/opt/py/bin/python", cwd="/w s") == (
        "cd '/w s' && /opt/py/bin/python -m rlmdistill.cli rl x.yaml"
    )


def test_runtime_env_ships_the_package_and_uploads_only_when_asked(tmp_path: Path) -> None:
    import rlmdistill

    package = str(Path(rlmdistill.__file__).resolve().parent)
    env = ray_jobs.runtime_env(tmp_path)
    assert env == {"env_vars": {"PYTHONUNBUFFERED": "1"}, "py_modules": [package]}
    env = ray_jobs.runtime_env(tmp_path, files="upload", ship_code=False)
    assert env == {
        "env_vars": {"PYTHONUNBUFFERED": "1"},
        "working_dir": str(tmp_path.resolve()),
        "excludes": [".git", ".venv", ".cache", ".dashboard", "__pycache__"],
    }


# ------------------------------------------------------------------ the command (fast)
def test_out_dir_is_the_last_out_flag() -> None:
    assert out_dir_of(["sft", "--out", "adapters/a", "--max-steps", "2"]) == "adapters/a"
    assert out_dir_of(["sft", "--out=adapters/b", "--out", "adapters/c"]) == "adapters/c"
    assert out_dir_of(["loop", "exp.yaml"]) is None


def test_submit_takes_the_command_after_the_double_dash(tmp_path: Path) -> None:
    """Nothing answers on port 9: exit 2 naming the address, nothing recorded; the words
    after ``--`` reached the options as the command, flags included."""
    seen: list[SubmitOptions] = []
    import rlmdistill.cluster.cli as submit_cli

    real = submit_cli.submit_main

    def spy(options: SubmitOptions, echo: Any = None) -> int:
        seen.append(options)
        return real(options, echo)

    args = ["submit", "--ray-address", "127.0.0.1:9", "--workspace", str(tmp_path),
            "--no-follow", "--", "sft", "--dataset", "datasets/d", "--out", "adapters/a"]  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(submit_cli, "submit_main", spy)
        res = runner.invoke(app, args)
    assert res.exit_code == 2
    assert "nothing answers at 127.0.0.1:9" in res.output
    (opts,) = seen
    assert opts.command == ["sft", "--dataset", "datasets/d", "--out", "adapters/a"]
    assert (opts.ray_address, opts.follow, opts.files) == ("127.0.0.1:9", False, "shared")
    assert not jobs.jobs_dir(tmp_path).exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [([], "give one of: a command after `--`"),
     (["--stop", "a", "--attach", "a"], "got stop, attach"),
     (["--", "--help"], "must be an rlmdistill command"),
     (["--", "submit", "sft"], "must be an rlmdistill command (sft, rl, loop, ...), not 'submit'"),
     (["--stop", "nope"], "no job 'nope' in"),
     (["--stop", "old"], "runs on this machine (pid")],
)  # fmt: skip
def test_submit_refuses_bad_input_with_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    _local_record(tmp_path)
    res = runner.invoke(app, ["submit", "--ray-address", "127.0.0.1:9",
                              "--workspace", str(tmp_path), *args])  # fmt: skip
    assert res.exit_code == 2, res.output
    assert message in " ".join(res.output.split())


def test_submit_main_refuses_a_workspace_that_is_not_a_folder(tmp_path: Path) -> None:
    opts = SubmitOptions(command=["sft"], ray_address="127.0.0.1:9", workspace=tmp_path / "no")
    assert submit_main(opts) == 2


def test_a_head_that_did_not_answer_is_not_asked_again_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two refreshes of jobs on a dead head within RECHECK_S make one connection attempt."""
    calls: list[str] = []
    real = ray_jobs._check

    def check(url: str, timeout_s: float = 3.0) -> None:
        calls.append(url)
        real(url, 0.5)

    monkeypatch.setattr(ray_jobs, "_check", check)
    monkeypatch.setattr(ray_jobs, "_DOWN", {})
    port = _free_ports(1)[0]  # nothing listens there
    for _ in range(2):
        with pytest.raises(ray_jobs.RayJobsError, match=f"nothing answers at 127.0.0.1:{port}"):
            ray_jobs.job_info(f"127.0.0.1:{port}", "x-1")
    assert calls == [f"http://127.0.0.1:{port}"]


def test_sft_page_lists_a_finished_ray_job_from_its_record_without_asking_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record says SUCCEEDED: the page shows it (where, state, Ray id, log) and makes no
    request (nothing listens at the record's address)."""
    from streamlit.testing.v1 import AppTest

    import rlmdistill.dashboard.app as app_module
    from rlmdistill.dashboard.data import ENV_WORKSPACE

    job = _remote_record(tmp_path, status="SUCCEEDED")
    Path(job.log).write_text(
        "Running entrypoint for job r1-0123abcd: python -m ...\nsft: 2 steps\n"
    )
    asked: list[str] = []
    monkeypatch.setattr(ray_jobs, "job_info", lambda *a: asked.append("info"))
    monkeypatch.setenv(ENV_WORKSPACE, str(tmp_path))
    at = AppTest.from_file(str(Path(app_module.__file__)), default_timeout=30)
    at.query_params["page"] = "sft"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d.value for d in at.dataframe if "job" in d.value.columns)
    assert table[["job", "state", "where", "out"]].values.tolist() == [
        ["r1", "succeeded", "http://127.0.0.1:8265", "adapters/r"]
    ]
    assert any("Ray job `r1-0123abcd` at http://127.0.0.1:8265" in c.value for c in at.caption)
    assert any("sft: 2 steps" in c.value for c in at.code)
    assert asked == []


# ------------------------------------------------------------------ a real head (slow)
def _have_ray_jobs() -> bool:
    """Ray with its dashboard's job server (``ray[default]``: aiohttp_cors among others)."""
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) for m in ("ray.job_submission", "aiohttp_cors"))
    except ImportError:  # no ray at all
        return False


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Head:
    """A Ray head started by ``ray start --head`` in its own session (process group)."""

    def __init__(self, pgid: int, url: str, temp_dir: Path) -> None:
        self.pgid, self.url, self.temp_dir = pgid, url, temp_dir

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL to what is left 10 s later (gcs_server and the raylet
        can hang in their graceful shutdown)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.3)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    if not _have_ray_jobs():
        if os.environ.get("RLMDISTILL_REQUIRE_RAY") == "1":
            pytest.fail("RLMDISTILL_REQUIRE_RAY=1 but Ray's job server cannot be imported")
        pytest.skip("needs the ray extra (ray[default]): pip install 'rlmdistill[ray]'")
    # a short path: Ray's socket files live under it (AF_UNIX paths are limited to 107 bytes)
    temp_dir = Path(tempfile.mkdtemp(prefix="rlmd-rj-", dir="/tmp"))
    gcs, dash, client, agent_http, agent_grpc, metrics, runtime_env_agent = _free_ports(7)
    bindir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",  # `python` = this venv's
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # keep 127.0.0.1 (RECIPES-turn3.md s. 1)
        "RAY_USAGE_STATS_ENABLED": "0",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [str(bindir / "ray"), "start", "--head", "--node-ip-address", "127.0.0.1",
           "--port", str(gcs), "--num-cpus", "1", "--include-dashboard", "true",
           "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
           "--ray-client-server-port", str(client), "--dashboard-agent-listen-port",
           str(agent_http), "--dashboard-agent-grpc-port", str(agent_grpc),
           "--metrics-export-port", str(metrics), "--runtime-env-agent-port",
           str(runtime_env_agent), "--temp-dir", str(temp_dir), "--disable-usage-stats"]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    h = Head(proc.pid, f"http://127.0.0.1:{dash}", temp_dir)
    try:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode(errors="replace")[-3000:]
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + 60
        while True:  # the job server answers a little after `ray start` returns
            try:
                JobSubmissionClient(h.url).list_jobs()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        yield h
    finally:
        h.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_state(job: jobs.JobRecord, wanted: set[str], timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := jobs.refresh(job)) not in wanted:
        assert time.monotonic() < deadline, (state, jobs.read_log(job))
        time.sleep(0.5)
    return state


@pytest.mark.slow
@pytest.mark.timeout(900)  # 155-192 s here on 2 busy cores; four jobs, each importing torch
def test_submit_sft_through_ray_jobs_records_it_and_the_dashboard_lists_it(
    head: Head,
    tmp_path: Path,
    tiny_llama_dir: Path,
    smollm2_tokenizer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ray.job_submission import JobSubmissionClient
    from streamlit.testing.v1 import AppTest
    from test_sft import CONVERSATIONS, render_row, write_dataset

    import rlmdistill.dashboard.app as app_module
    from rlmdistill.dashboard.data import ENV_WORKSPACE
    from rlmdistill.sft.train import SFTManifest
    from rlmdistill.traces.store import read_jsonl

    ws = tmp_path / "ws"
    rows = [render_row(smollm2_tokenizer, c, episode_id=f"ep{i}") for i, c in enumerate(CONVERSATIONS)]  # fmt: skip
    write_dataset(ws / "datasets" / "tiny", smollm2_tokenizer, rows)
    sft = ["sft", "--dataset", "datasets/tiny", "--base", str(tiny_llama_dir),
           "--out", "adapters/ray", "--max-steps", "2", "--lora-r", "4"]  # fmt: skip
    t0 = time.monotonic()
    submit = ["submit", "--ray-address", head.url, "--workspace", str(ws)]
    res = runner.invoke(app, [*submit, "--name", "sft-ray", "--", *sft])
    wall = time.monotonic() - t0
    assert res.exit_code == 0, res.output
    assert "job sft-ray: succeeded (exit status 0)" in res.output
    (job,) = jobs.list_jobs(ws)
    assert (job.name, job.where, job.files, job.out_dir) == (
        "sft-ray",
        head.url,
        "shared",
        "adapters/ray",
    )
    assert job.ray_job_id is not None and job.ray_job_id.startswith("sft-ray-")
    assert job.command == ["python", "-m", "rlmdistill.cli", *sft]
    assert jobs.job_state(job) == ("succeeded", 0)
    # the cluster agrees, and the record's log is the cluster's log
    client = JobSubmissionClient(head.url)
    assert str(client.get_job_status(job.ray_job_id)) == "SUCCEEDED"
    log = jobs.read_log(job, 10**9)
    assert log == client.get_job_logs(job.ray_job_id)
    assert f"Running entrypoint for job {job.ray_job_id}" in log
    # the job ran in the workspace (files="shared") with the shipped package: its outputs are here
    manifest = SFTManifest.model_validate_json((ws / "adapters/ray/sft.json").read_text())
    assert (manifest.global_step, manifest.status, manifest.config["lora_r"]) == (2, "completed", 4)
    assert [r["step"] for r in read_jsonl(ws / "adapters/ray/train_log.jsonl").records] == [1, 2]
    print(f"submit -> SUCCEEDED, followed: {wall:.1f} s")

    # the dashboard's SFT page lists it with where it ran, and shows its log and loss
    monkeypatch.setenv(ENV_WORKSPACE, str(ws))
    at = AppTest.from_file(str(Path(app_module.__file__)), default_timeout=60)
    at.query_params["page"] = "sft"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = next(d.value for d in at.dataframe if "job" in d.value.columns)
    row = table.set_index("job").loc["sft-ray"]
    assert (row["state"], row["exit status"], row["where"]) == ("succeeded", 0, head.url)
    assert any("`succeeded` (exit status 0)" in m.value for m in at.markdown)
    assert any(f"Ray job `{job.ray_job_id}`" in c.value for c in at.caption)
    assert any(f"Running entrypoint for job {job.ray_job_id}" in c.value for c in at.code)
    assert {m.label: m.value for m in at.metric}["step"] == "2"

    # a long job, submitted without following, is stopped by name
    long = [*sft[:5], "--out", "adapters/long", "--max-steps", "100000"]
    res = runner.invoke(app, [*submit, "--name", "long", "--no-follow", "--", *long])
    assert res.exit_code == 0, res.output
    job2 = jobs.find_job(ws, "long")
    _wait_state(job2, {"running"})
    res = runner.invoke(app, ["submit", "--workspace", str(ws), "--stop", "long"])
    assert res.exit_code == 0, res.output
    assert "stop requested" in res.output
    assert _wait_state(job2, {"stopped", "failed", "succeeded"}, 60) == "stopped"
    assert str(client.get_job_status(str(job2.ray_job_id))) == "STOPPED"
    res = runner.invoke(app, ["submit", "--workspace", str(ws), "--attach", "long"])
    assert res.exit_code == 1 and "job long: stopped" in res.output

    # the SFT page's start form submits to the cluster when given its address
    at = AppTest.from_file(str(Path(app_module.__file__)), default_timeout=60)
    at.query_params["page"] = "sft"
    at.run()
    at.text_input(key="sft_name").set_value("from-page")
    at.text_input(key="sft_ray_address").set_value(head.url)
    at.number_input(key="sft_steps").set_value(1)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    page_job = jobs.find_job(ws, "from-page")
    assert (page_job.where, page_job.files, page_job.out_dir) == (
        head.url,
        "shared",
        "adapters/from-page",
    )
    assert page_job.command[3:5] == ["sft", "--dataset"]
    state = _wait_state(page_job, {"succeeded", "failed", "stopped", "lost"})
    assert state == "succeeded", jobs.read_log(page_job, 10**9)
    manifest = SFTManifest.model_validate_json((ws / "adapters/from-page/sft.json").read_text())
    assert manifest.global_step == 1

    # files=upload: the workspace (its config file included) travels as the job's working_dir;
    # the job writes its adapter in that copy on the cluster, not here
    (ws / "sft-small.yaml").write_text("lora_r: 2\n")
    up = [
        "sft",
        "--config",
        "sft-small.yaml",
        *sft[1:5],
        "--out",
        "adapters/up",
        "--max-steps",
        "1",
    ]
    res = runner.invoke(app, [*submit, "--name", "up", "--files", "upload", "--", *up])
    assert res.exit_code == 0, res.output
    job3 = jobs.find_job(ws, "up")
    assert (job3.files, job3.out_dir, jobs.job_state(job3)) == (
        "upload",
        "adapters/up",
        ("succeeded", 0),
    )
    log = jobs.read_log(job3, 10**9)
    assert not (ws / "adapters" / "up").exists()
    # the copy is in the head's temp folder (this machine): the uploaded config set lora_r 2
    found = re.search(r"sft: 1 steps on 2 examples.* -> (\S+)\n", log)
    assert found is not None, log[-2000:]
    copy = Path(found[1])
    assert copy.is_relative_to(head.temp_dir) and copy.parts[-2:] == ("adapters", "up")
    assert json.loads((copy / "adapter_config.json").read_text())["r"] == 2
