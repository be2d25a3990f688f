"""Serve the dashboard (``streamlit run`` subprocess, headless, loopback) and load every page
in headless Chromium, driven by Playwright over the system ``chromium``: key elements render,
no exception is shown, and a screenshot per page is saved under ``artifacts/dashboard/`` as a
test artefact. Skipped when Chromium or Playwright is absent (a failure under CI's
``RLMDISTILL_REQUIRE_BROWSER=1``).

Each page is a new browser page (a new Streamlit session), and the test waits for the texts it
wants in the live DOM before it reads or photographs it. Chromium's own ``--dump-dom`` /
``--screenshot`` with ``--virtual-time-budget`` could not wait for them: Streamlit's content
comes over a websocket, which does not hold virtual time, so a screenshot could be taken before
the page had rendered (CI, stop 62: a blank 7.6 kB Compare page at every budget)."""

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
from typing import Any

import pytest

from rlmdistill.dashboard.cli import dashboard_command
from rlmdistill.dashboard.data import ENV_WORKSPACE

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # the dev extra installs it
    sync_playwright = None  # type: ignore[assignment]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "dashboard"

REQUIRE_BROWSER = os.environ.get("RLMDISTILL_REQUIRE_BROWSER") == "1"
"""Set by CI (``.ci/run``): a missing Chromium fails these tests instead of skipping them."""

pytestmark = [
    pytest.mark.slow,  # ~60 s on a 2-core CPU (a server, 12+ page loads)
    pytest.mark.skipif(
        (CHROMIUM is None or sync_playwright is None) and not REQUIRE_BROWSER,
        reason="chromium or playwright not installed (apt-get install chromium)",
    ),
]

WAIT_S = 180.0
"""How long one page may take to show its texts on a busy machine (a bound, never a measure)."""


@pytest.fixture(autouse=True)
def _chromium_present() -> None:
    """Under ``RLMDISTILL_REQUIRE_BROWSER=1`` a missing Chromium or Playwright is a failure."""
    if CHROMIUM is None or sync_playwright is None:
        pytest.fail("chromium or playwright missing and RLMDISTILL_REQUIRE_BROWSER=1 (CI)")


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


@contextlib.contextmanager
def _browser() -> Iterator[Any]:
    """One headless Chromium (the system's, no download) for the test's page loads."""
    assert sync_playwright is not None and CHROMIUM is not None
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def _load(browser: Any, url: str, wanted: list[str], shot: Path | None = None) -> tuple[str, str]:
    """Open ``url`` in a new page (a new Streamlit session), wait until every ``wanted`` text
    is in its visible text, Streamlit has stopped running the script and no widget is a
    loading skeleton, photograph it to
    ``shot`` (a blank page is a ~8 kB image, so a smaller file fails) and return its DOM and
    visible text. Waits at most ``WAIT_S`` for the texts; returns what it has then."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(url, timeout=WAIT_S * 1000)
        deadline = time.monotonic() + WAIT_S
        while True:
            dom = page.content()
            text = _visible_text(dom)
            if all(w in text for w in wanted) or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        # the "Running..." widget (the script still runs) and the grey skeletons that stand in
        # for widgets whose code has not loaded yet (the SFT page's form fields)
        for busy in ("stStatusWidget", "stSkeleton"):
            page.wait_for_selector(
                f'[data-testid="{busy}"]', state="detached", timeout=WAIT_S * 1000
            )
        if shot is not None:
            page.screenshot(path=str(shot))
            assert shot.stat().st_size > 10_000, f"blank screenshot of {url}"
        dom = page.content()
        return dom, _visible_text(dom)
    finally:
        page.close()


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
    with _serve(ws) as url, _browser() as browser:
        for page, wanted in RS_PAGES.items():
            extra = "&run=r2-eval-tuned" if page == "trace" else ""
            shot = ARTIFACTS / f"room_scaling-{page}.png"
            dom, text = _load(browser, f"{url}/?page={page}{extra}", wanted, shot)
            missing = [w for w in wanted if w not in text]
            assert not missing, f"page {page}: missing {missing}; text: {text[-2000:]}"
            assert 'data-testid="stException"' not in dom, f"page {page} shows an exception"
            if page == "sft":  # the base model field's value: what the workspace trained
                assert 'value="local:qwen2.5-coder-0.5b"' in dom
            assert "Deploy" not in text
            assert str(tmp_path) not in text  # the sidebar names the workspace, not its path


def test_every_page_renders_in_chromium_without_exception(server: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _browser() as browser:
        for page, wanted in PAGES.items():
            url = f"{server}/?page={page}"
            dom, text = _load(browser, url, wanted, ARTIFACTS / f"{page}.png")
            missing = [w for w in wanted if w not in text]
            assert not missing, f"page {page}: missing {missing}; text: {text[-2000:]}"
            assert 'data-testid="stException"' not in dom, f"page {page} shows an exception"
            assert "Traceback" not in text, f"page {page} shows a traceback"
