"""Label the walkthrough's 20 episodes in the dashboard's Review page with the keyboard
(Playwright over the system Chromium), as decisions.py says; screenshots to OUT.

    rlmdistill dashboard --workspace WS/room_scaling --headless --port 8766 &
    python drive.py http://127.0.0.1:8766 WS/room_scaling OUT

It checks that each queued episode is the one decisions.py expects (random queue, seed 0)."""

import shutil
import sys
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from decisions import T

url, ws, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
KEY = {"P": "p", "F": "f", "U": "u"}


def lines(run):
    p = ws / "runs" / run / "labels.jsonl"
    return len(p.read_text().splitlines()) if p.exists() else 0


def idle(page):
    time.sleep(0.4)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=120000
    )
    time.sleep(0.3)


def press(page, run, key, n):
    page.evaluate("document.activeElement && document.activeElement.blur()")
    page.keyboard.press(key)
    deadline = time.time() + 120
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


with sync_playwright() as pw:
    b = pw.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
    page = b.new_page(viewport={"width": 1400, "height": 1000})
    for run, eps in T.items():
        page.goto(f"{url}/?page=review&run={run}&reviewer=h4-agent", timeout=120000)
        page.get_by_text("labelled 0 / queue").wait_for(timeout=120000)
        idle(page)
        n = lines(run)
        for k, (prefix, letters, ctags, ev, etags, enote) in enumerate(eps):
            page.get_by_text(f"episode {k + 1} of").wait_for(timeout=120000)
            body = page.inner_text("body")
            assert prefix in body, (run, k, prefix)
            if run == "r2-train" and k == 0:
                page.screenshot(path=str(out / "review-blind.png"))
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
            if run == "r2-train" and k == 0:
                page.screenshot(path=str(out / "review-labelled.png"), full_page=True)
            page.evaluate("document.activeElement && document.activeElement.blur()")
            page.keyboard.press("n")
            idle(page)
            print(run, k, prefix, "done", lines(run), flush=True)
        page.screenshot(path=str(out / f"review-{run}-done.png"))
    b.close()
