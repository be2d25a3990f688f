"""Label the quickstart walkthrough's episodes in the dashboard's Review page with the keyboard
(Playwright over the system Chromium), as decisions.py says; screenshots to OUT.

    rlmdistill dashboard --workspace WS/quickstart --headless --port 8767 &
    python drive.py http://127.0.0.1:8767 WS/quickstart OUT

It checks that each queued episode is the one decisions.py expects (random queue, seed 0),
labels its first ``len(letters)`` criteria with p/f/u (tags and notes typed into the card's
"Tags and note" box first), keeps or rejects it with k/r and moves on with n. A run whose
episodes have no memo is not queued by the page: the driver screenshots what the page says."""

import shutil
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from decisions import CARD, REVIEWER, T

url, ws, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
KEY = {"P": "p", "F": "f", "U": "u"}


def lines(run):
    p = ws / "runs" / run / "labels.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def idle(page):
    time.sleep(0.4)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=180000
    )
    time.sleep(0.3)


def press(page, run, key, n):
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press(key)
    deadline = time.time() + 180
    while lines(run) < n:
        assert time.time() < deadline, (run, key, n, lines(run))
        time.sleep(0.2)
    idle(page)


def tag(page, scope, tags, note):
    box = page.locator(scope).first
    if not box.locator('[data-testid="stMultiSelect"] input').first.is_visible():
        box.locator("summary").first.click()
        idle(page)
    for t in tags:
        inp = box.locator('[data-testid="stMultiSelect"] input').first
        inp.click()
        inp.type(t)
        page.keyboard.press("Enter")
        idle(page)
        page.keyboard.press("Escape")
    if note:
        ni = box.locator('input[aria-label="Note"]').first
        ni.fill(note)
        ni.press("Enter")
        idle(page)


t0 = time.time()
with sync_playwright() as pw:
    b = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    page = b.new_page(viewport={"width": 1400, "height": 1000})
    for run, eps in T.items():
        start = time.time()
        page.goto(f"{url}/?page=review&run={run}&reviewer={REVIEWER}", timeout=180000)
        if not eps:  # no memo in the run: nothing is queued
            page.get_by_text("No episode to review").wait_for(timeout=180000)
            idle(page)
            page.screenshot(path=str(out / f"review-quickstart-{run}.png"))
            print(run, "not queued:", "no episode of this run has a memo", flush=True)
            continue
        page.get_by_text("labelled 0 / queue").wait_for(timeout=180000)
        idle(page)
        n = lines(run)
        for k, (prefix, letters, ctags, ev, etags, enote) in enumerate(eps):
            page.get_by_text(f"episode {k + 1} of").wait_for(timeout=180000)
            body = page.inner_text("body")
            assert prefix in body, (run, k, prefix)
            if k == 0:
                page.screenshot(path=str(out / f"review-quickstart-{run}-blind.png"))
            for i, v in enumerate(letters):
                if i in ctags:
                    tag(page, f".st-key-rv_card_{i}", *ctags[i])
                n += 1
                press(page, run, KEY[v], n)
            if etags or enote:
                tag(
                    page,
                    '[data-testid="stExpander"]:has-text("Episode tags and note")',
                    etags,
                    enote,
                )
            n += 1
            press(page, run, ev, n)
            if k == 0:
                page.screenshot(
                    path=str(out / f"review-quickstart-{run}-labelled.png"), full_page=True
                )
            if CARD.get(run, (None,))[0] == k:  # one labelled criterion's card, gold shown
                page.set_viewport_size({"width": 1400, "height": 2400})
                idle(page)
                card = page.locator(f".st-key-rv_card_{CARD[run][1]}")
                card.scroll_into_view_if_needed()
                card.screenshot(path=str(out / f"review-quickstart-{run}-card.png"))
                page.set_viewport_size({"width": 1400, "height": 1000})
                idle(page)
            page.evaluate("document.activeElement && document.activeElement.blur()")
            page.keyboard.press("n")
            idle(page)
            print(run, k, prefix, "done", lines(run), f"{time.time() - t0:.0f}s", flush=True)
        page.get_by_text("Graders against people").first.click()
        idle(page)
        page.screenshot(path=str(out / f"review-quickstart-{run}-done.png"))
        print(run, f"{n} lines in {time.time() - start:.0f}s", flush=True)
    b.close()
print(f"total {time.time() - t0:.0f}s")
