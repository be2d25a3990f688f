"""The Review page in a real headless Chromium (driven by Playwright over the system
``chromium``): three criteria and one keep/reject are labelled by keyboard, the page is
reloaded, and ``runs/NAME/labels.jsonl`` holds the labels with the hash of the memo the
reviewer saw. Skipped when Chromium or Playwright is absent (a failure under CI's
``RLMDISTILL_REQUIRE_BROWSER=1``)."""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import pytest
from test_dashboard_browser import ARTIFACTS, CHROMIUM, REQUIRE_BROWSER, _serve

from rlmdistill.dashboard.review_queue import queue_items, review_queue
from rlmdistill.dashboard.runview import RunView
from rlmdistill.traces import labels as lb
from rlmdistill.traces.runs import load_room_tasks

try:
    from playwright.sync_api import Page, sync_playwright
except ImportError:  # the dev extra installs it
    sync_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.slow,  # ~40 s on a 2-core CPU (a server, one browser, six reruns)
    pytest.mark.skipif(
        (CHROMIUM is None or sync_playwright is None) and not REQUIRE_BROWSER,
        reason="chromium or playwright not installed",
    ),
]

WAIT_MS = 90_000
"""How long one rerun of the page may take on a busy machine (a bound, never a measure)."""


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def _wait_lines(path: Path, n: int) -> None:
    deadline = time.monotonic() + WAIT_MS / 1000
    while _lines(path) < n:
        assert time.monotonic() < deadline, f"{path} has {_lines(path)} lines, waited for {n}"
        time.sleep(0.2)


def _press(page: Page, key: str, path: Path, n: int, shows: str) -> None:
    """Press ``key`` on the page (nothing focused), wait for line ``n`` of ``path`` and for
    the rerun that shows ``shows``."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press(key)
    _wait_lines(path, n)
    page.get_by_text(shows).first.wait_for(timeout=WAIT_MS)


def test_review_labels_by_keyboard_survive_a_reload(tmp_path: Path, collected_run: Path) -> None:
    if CHROMIUM is None or sync_playwright is None:
        pytest.fail("chromium or playwright missing and RLMDISTILL_REQUIRE_BROWSER=1 (CI)")
    run = tmp_path / "runs" / "base"
    shutil.copytree(collected_run, run)
    view = RunView(run, "test")
    # the queue the page shows by default: random, seed 0, the reference grader
    first = review_queue(queue_items(view, "reference"), "random", seed=0)[0]
    summary = view.summary(first)
    task = load_room_tasks(view.manifest, [summary]).tasks[summary.room.room_hash]
    criteria = [c.id for c in task.criteria]
    assert len(criteria) >= 3
    labels_file = run / "labels.jsonl"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with _serve(tmp_path) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(f"{url}/?page=review&run=base", timeout=WAIT_MS)
        page.get_by_text(f"labelled 0 / queue {len(view.summaries())}").wait_for(timeout=WAIT_MS)
        assert page.locator('[data-testid="stException"]').count() == 0
        # blind mode (the default): no criterion's gold evidence before its label
        hidden = "Gold evidence hidden until you label this criterion"
        assert page.get_by_text(hidden).count() == len(criteria)
        reviewer = page.get_by_label("Reviewer")
        reviewer.fill("tester")
        reviewer.press("Enter")
        page.get_by_text(f"episode 1 of {len(view.summaries())}").wait_for(timeout=WAIT_MS)
        # a key typed into a text box is text, not a label (the note goes with the next
        # keep/reject)
        page.get_by_text("Episode tags and note").click()
        note = page.get_by_label("Note").first
        note.click()
        page.keyboard.press("p")
        time.sleep(1.0)
        assert _lines(labels_file) == 0
        _press(page, "p", labels_file, 1, "your label: PASS")
        _press(page, "f", labels_file, 2, "your label: FAIL")
        _press(page, "u", labels_file, 3, "your label: UNGRADABLE")
        _press(page, "k", labels_file, 4, "episode: keep")
        page.screenshot(path=str(ARTIFACTS / "review.png"))
        page.reload(timeout=WAIT_MS)  # the URL names the reviewer (&reviewer=tester)
        page.get_by_text(f"labelled 1 / queue {len(view.summaries())}").wait_for(timeout=WAIT_MS)
        for shown in ("your label: PASS", "your label: FAIL", "your label: UNGRADABLE"):
            page.get_by_text(shown).first.wait_for(timeout=WAIT_MS)
        page.get_by_text("episode: keep").wait_for(timeout=WAIT_MS)
        # the three labelled criteria now show their evidence; the others stay hidden
        assert page.get_by_text(hidden).count() == len(criteria) - 3
        _press(page, "n", labels_file, 4, f"episode 2 of {len(view.summaries())}")
        assert page.locator('[data-testid="stException"]').count() == 0
        browser.close()
    got = lb.read_labels(run)
    assert [(x.target, x.criterion_id, x.verdict) for x in got] == [
        ("criterion", criteria[0], "PASS"),
        ("criterion", criteria[1], "FAIL"),
        ("criterion", criteria[2], "UNGRADABLE"),
        ("episode", None, "keep"),
    ]
    assert got[3].note == "p"
    memo_sha = hashlib.sha256((summary.memo or "").encode("utf-8")).hexdigest()
    assert summary.memo and summary.memo_sha256 == memo_sha
    for x in got:
        assert x.episode_id == first
        assert x.memo_hash == lb.memo_hash(summary.memo) == memo_sha
        assert x.reviewer == "tester"
        assert x.time.tzinfo is not None
        assert not lb.is_stale(x, memo_sha)
