"""The step-through view in a real browser (Debian's chromium, driven by Playwright): the offline
file stepped through panel by panel with the keyboard, its numbers read back from the page,
screenshots at desktop and phone width with nothing wider than the screen; and the same view as
a page of `transformer serve`, opened from a translation's "Step through" link.

Chromium is installed as tests/test_serve_page.py does, or the tests are skipped, saying why.
``TRANSFORMER_SCREENSHOTS=DIR`` also keeps the screenshots there (docs/step-through*.png).
"""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

sync_api = pytest.importorskip("playwright.sync_api")
from test_serve_page import CHROMIUM, LAUNCH_ARGS, WAIT_MS, _install_chromium  # noqa: E402

from transformer.inspect.step_page import step_through_job  # noqa: E402

pytestmark = pytest.mark.slow  # trains a model and starts a browser

SENTENCE = "seven hundred and seventy-one"
PANELS = ["Tokens", "Embeddings and positional encoding", "Encoder self-attention: Q, K and V",
          "Scores, scaling and softmax", "The heads concatenated, and WO",
          "Add & norm, and the feed-forward network", "The decoder at one output step",
          "The final linear layer and softmax", "Beam search"]  # fmt: skip


@pytest.fixture(scope="module")
def browser_path() -> Path:
    if not CHROMIUM.exists():
        why_not = _install_chromium()
        if why_not:
            pytest.skip(f"no browser for the page test: {why_not}")
    return CHROMIUM


def keep(shot: Path) -> None:
    """Checks a screenshot and copies it to $TRANSFORMER_SCREENSHOTS, if set."""
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    if os.environ.get("TRANSFORMER_SCREENSHOTS"):
        shutil.copy(shot, Path(os.environ["TRANSFORMER_SCREENSHOTS"]) / shot.name)


def weights(view_matrix: dict) -> np.ndarray:
    data = base64.b64decode(view_matrix["data"])
    return np.frombuffer(data, "<f4").reshape(view_matrix["shape"])


def test_the_file_steps_through_every_panel_by_keyboard(browser_path, torch_engine, tmp_path):
    from test_step_through import read_view

    out = tmp_path / "step.html"
    step_through_job(torch_engine, SENTENCE, out)
    view = read_view(out)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(browser_path), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.set_default_timeout(WAIT_MS)
        asked, problems = [], []
        page.on("request", lambda r: asked.append(r.url))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(out.as_uri())
        sync_api.expect(page.locator("#sentence")).to_contain_text(view["translation"] or "(empty)")
        heading = page.locator(".panel:not([hidden]) h2")
        for i, title in enumerate(PANELS):
            sync_api.expect(heading).to_have_text(f"{i + 1}. {title}")
            assert page.locator(".panel:not([hidden])").count() == 1
            shot = tmp_path / f"step-through-{i + 1}.png"
            page.screenshot(path=str(shot), full_page=True)
            keep(shot)
            if i + 1 < len(PANELS):
                page.keyboard.press("ArrowRight" if i % 2 else "n")
                sync_api.expect(page.locator(".panel:not([hidden]) h2")).to_be_focused()

        # The numbers on the page are the file's: read one cell of the softmax by keyboard. The
        # page is opened again first: a full-page screenshot resizes the window, and the redraw
        # that follows a resize (after 150 ms) would make the panel's canvases anew mid-read.
        page.goto(out.as_uri())
        sync_api.expect(heading).to_have_text(f"1. {PANELS[0]}")
        page.keyboard.press("4")
        sync_api.expect(heading).to_have_text(f"4. {PANELS[3]}")  # shown before its canvas is read
        canvas = page.locator(".panel:not([hidden]) canvas").nth(2)  # Q·Kᵀ, scaled, softmax
        canvas.focus()
        page.keyboard.press("ArrowRight")
        readout = page.locator(".panel:not([hidden]) output").nth(2)
        sync_api.expect(readout).to_contain_text("=")  # the cell's value, once the key is handled
        shown = float(readout.inner_text().rsplit("=", 1)[1])
        want = weights(view["encoder"][0]["self"]["weights"])[0, 0, 1]  # head 1, row 1, column 2
        assert shown == pytest.approx(float(want), abs=5e-5)
        # The decoder's step slider moves with the keyboard and the panel follows it.
        page.keyboard.press("7")
        slider = page.locator("#dec-step")
        slider.focus()
        page.keyboard.press("ArrowRight")
        second = view["target"]["pieces"][1] if len(view["target"]["pieces"]) > 1 else None
        if second:
            sync_api.expect(page.locator(".panel:not([hidden]) .body p.sentence")).to_contain_text(
                "Step 2"
            )

        # Phone width: every panel fits; wide figures scroll inside their own boxes.
        page.set_viewport_size({"width": 375, "height": 800})
        page.locator(".panel:not([hidden]) h2").focus()  # out of the slider: keys move again
        for i in range(len(PANELS)):
            page.keyboard.press(str(i + 1))
            width = page.evaluate("document.documentElement.scrollWidth")
            panel = page.evaluate("document.querySelector('.panel:not([hidden])')"
                                  ".getBoundingClientRect().right")  # fmt: skip
            assert width <= 375 and panel <= 375, (PANELS[i], width, panel)
            if i + 1 in (1, 4, 9):
                shot = tmp_path / f"step-through-phone-{i + 1}.png"
                page.screenshot(path=str(shot), full_page=True)
                keep(shot)
        browser.close()
    assert problems == []
    assert asked and all(u.startswith("file://") or u.startswith("data:") for u in asked)


def test_the_serve_page_links_each_translation_to_its_view(
    browser_path, numbers_model, server_process, tmp_path
):
    import httpx

    _, url = server_process(numbers_model)
    expected = httpx.post(f"{url}/translate", json={"sentences": [SENTENCE]}, timeout=60).json()
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(browser_path), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        page.set_default_timeout(WAIT_MS)
        asked, problems = [], []
        page.on("request", lambda r: asked.append(r.url))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(f"{url}/")
        page.locator("#source").fill(SENTENCE)
        page.locator("#source").press("Control+Enter")
        link = page.locator("#results .step-link")
        sync_api.expect(link).to_have_count(1)
        link.focus()
        page.keyboard.press("Enter")  # a link, so the keyboard opens it too
        text = expected["translations"][0]["text"] or "(empty)"
        sync_api.expect(page.locator("#sentence")).to_contain_text(f"{SENTENCE} → {text}")
        sync_api.expect(page.locator("#steps button")).to_have_count(len(PANELS))
        page.keyboard.press("9")
        sync_api.expect(page.locator(".panel:not([hidden]) svg").first).to_be_visible()
        page.screenshot(path=str(tmp_path / "served.png"), full_page=True)
        keep(tmp_path / "served.png")
        browser.close()
    assert problems == []  # a blocked inline style or script would show as a console error
    assert all(u.startswith(url) or u.startswith("data:") for u in asked)
