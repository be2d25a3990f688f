"""Serve the dashboard (``streamlit run`` subprocess, headless, loopback) and load every page
in headless Chromium: key elements render, no exception is shown, and a screenshot per page is
saved under ``artifacts/dashboard/`` as a test artefact. Skipped when Chromium is absent."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlmdistill.dashboard.cli import dashboard_command
from rlmdistill.dashboard.data import ENV_WORKSPACE

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"

REQUIRE_BROWSER = os.environ.get("RLMDISTILL_REQUIRE_BROWSER") == "1"
"""Set by CI (``.ci/run``): a missing Chromium fails these tests instead of skipping them."""

pytestmark = [
    pytest.mark.slow,  # ~60 s on a 2-core CPU (a server, 12+ Chromium page loads)
    pytest.mark.skipif(
        CHROMIUM is None and not REQUIRE_BROWSER,
        reason="chromium not installed (apt-get install chromium)",
    ),
]


@pytest.fixture(autouse=True)
def _chromium_present() -> None:
    """Under ``RLMDISTILL_REQUIRE_BROWSER=1`` a missing Chromium is a failure."""
    if CHROMIUM is None:
        pytest.fail("chromium not installed and RLMDISTILL_REQUIRE_BROWSER=1 (CI)")


PAGES = {
    "runs": ["Runs", "2/2", "completed"],
    "compare": ["Behaviour shift", "Sub-calls vs room size", "Pass rate vs coverage"],
    "trace": ["Trace viewer", "Turn 0", "Root completion", "sub-call(s) made by block 0"],
    "filter": ["Filter preview", "Dropped by reason", "duplicate"],
    "sft": ["SFT jobs", "Start SFT job", "a1"],
    # one depth-1 run: the report's depth section is empty and says what it needs
    "ablations": ["Ablations", "Depth 1 vs depth 2", "needs a depth-1 and a depth-2 run"],
}
"""Page slug -> texts that must be visible once the page has rendered."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _visible_text(dom: str) -> str:
    dom = re.sub(r"<(script|style|noscript)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def _chromium(*args: str) -> str:
    out = subprocess.run(
        [
            CHROMIUM,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,1000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return out.stdout


def _sft_json(status: str = "completed", **fields: object) -> str:
    """A complete ``sft.json`` (every field of rlmdistill.traces.artefacts.SFTManifest)."""
    import json

    data: dict[str, object] = {
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:01:00Z",
        "status": status, "config": {"base": "smollm2-135m"}, "base_path": "/models/x",
        "dataset_path": "d", "export_sha256": "0" * 64, "tokenizer_check": {}, "n_rows": 3,
        "n_examples": 3, "dropped": {}, "n_tokens": 30, "n_supervised": 10, "device": "cpu",
        "precision": "float32", "world_size": 1, "seed": 0, "versions": {},
        "git_commit": None, "git_dirty": None,
    }  # fmt: skip
    return json.dumps({**data, **fields})


@contextlib.contextmanager
def _serve(workspace: Path) -> Iterator[str]:
    """The dashboard served over ``workspace`` on a free loopback port; yields its URL."""
    port = _free_port()
    env = {**os.environ, ENV_WORKSPACE: str(workspace)}
    log_path = workspace / "streamlit.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        dashboard_command(workspace, port, headless=True, address="127.0.0.1"),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not start: {log_path.read_text()}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def server(tmp_path: Path, collected_run: Path) -> Iterator[str]:
    """The dashboard served over a workspace with the collected run and one adapter."""
    shutil.copytree(collected_run, tmp_path / "runs" / "base")
    adapter = tmp_path / "adapters" / "a1"
    adapter.mkdir(parents=True)
    (adapter / "sft.json").write_text(_sft_json())
    (adapter / "train_log.jsonl").write_text(
        "".join(
            json.dumps(
                {
                    "step": i,
                    "loss": 2.0 / i,
                    "learning_rate": 1e-4,
                    "tokens_seen": 10 * i,
                    "tokens_per_s": 5.0,
                }
            )
            + "\n"
            for i in (1, 2, 3)
        )
    )
    with _serve(tmp_path) as url:
        yield url


def _render(url: str, wanted: list[str]) -> tuple[str, str, int]:
    """The page's DOM and visible text once every ``wanted`` text shows (longer virtual-time
    budgets on a slow first render), and the budget that sufficed."""
    text, dom, budget = "", "", 0
    for budget in (8000, 30000, 60000, 60000):
        dom = _chromium(f"--virtual-time-budget={budget}", "--dump-dom", url)
        text = _visible_text(dom)
        if all(w in text for w in wanted):
            break
    return dom, text, budget


def _screenshot(url: str, shot: Path, budget: int) -> None:
    """A screenshot of ``url``; a new page load, so retried with longer budgets on a busy
    machine (a blank first render is a ~9 kB image)."""
    for shot_budget in sorted({budget, 30000, 60000}):
        shot.unlink(missing_ok=True)
        _chromium(f"--virtual-time-budget={shot_budget}", f"--screenshot={shot}", url)
        if shot.exists() and shot.stat().st_size > 10_000:
            return
    pytest.fail(f"no screenshot of {url}")


RS_TARBALL = Path(__file__).resolve().parents[1] / "docs/results/room_scaling/workspace.tar.xz"

RS_PAGES = {
    "compare": ["tuned-r2 9.0% vs base 0.0%", "10 of 12 rooms up, 0 down, 2 tied", "p = 0.002"],
    "runs": ["eval-base", "r2-train"],
    "ablations": ["What each depth costs", "eval-base · eval"],
    "filter": ["r1-train · train", "Dropped by reason"],
    "trace": ["pass rate (reference)", "Root completion"],
    "sft": ["Start SFT job"],
}
"""room_scaling page slug -> texts that must show (the Compare headline card first)."""


def test_compare_headline_card_on_room_scaling_and_every_page_in_chromium(
    tmp_path: Path,
) -> None:
    """On the finished room_scaling workspace, Compare opens on the loop report's tuned-r2
    against base and its headline card reads as the report does; every page renders without
    an exception, and a screenshot of each goes to ``artifacts/dashboard/room_scaling-*.png``
    (the docs' ``docs/images/dashboard-*.png`` are copies)."""
    with tarfile.open(RS_TARBALL) as tar:
        tar.extractall(tmp_path, filter="data")
    ws = tmp_path / "room_scaling"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _serve(ws) as url:
        for _ in range(3):  # warm-up: the first session imports every page module
            if "eval-base" in _visible_text(
                _chromium("--virtual-time-budget=60000", "--dump-dom", f"{url}/?page=runs")
            ):
                break
        for page, wanted in RS_PAGES.items():
            extra = "&run=r2-eval-tuned" if page == "trace" else ""
            dom, text, budget = _render(f"{url}/?page={page}{extra}", wanted)
            missing = [w for w in wanted if w not in text]
            assert not missing, f"page {page}: missing {missing}; text: {text[-2000:]}"
            assert 'data-testid="stException"' not in dom, f"page {page} shows an exception"
            if page == "sft":  # the base model field's value: what the workspace trained
                assert 'value="local:qwen2.5-coder-0.5b"' in dom
            assert "Deploy" not in text
            assert str(tmp_path) not in text  # the sidebar names the workspace, not its path
            _screenshot(
                f"{url}/?page={page}{extra}", ARTIFACTS / f"room_scaling-{page}.png", budget
            )


def test_every_page_renders_in_chromium_without_exception(server: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # Warm-up: the first session imports every page module (numpy, pandas, filter, ...); on a
    # busy 2-core machine that can outlast one page load.
    for _ in range(3):
        if "Episodes by status" in _visible_text(
            _chromium("--virtual-time-budget=60000", "--dump-dom", f"{server}/?page=runs")
        ):
            break
    for page, wanted in PAGES.items():
        url = f"{server}/?page={page}"
        dom, text, budget = _render(url, wanted)
        missing = [w for w in wanted if w not in text]
        assert not missing, f"page {page}: missing {missing}; text: {text[-2000:]}"
        assert 'data-testid="stException"' not in dom, f"page {page} shows an exception"
        assert "Traceback" not in text, f"page {page} shows a traceback"
        _screenshot(url, ARTIFACTS / f"{page}.png", budget)
