"""The web page end to end in a real browser: Debian's chromium, driven by Playwright, against a
real server process on a free localhost port. It types sentences, waits for the translations,
opens the attention of one by mouse and of another by keyboard, checks the heatmap against the
API, checks phone width, and saves a screenshot.

Chromium is installed through apt when it is missing and the test runs as root; otherwise the
test is skipped, saying why. ``--serve-model DIR --screenshot docs/serve.png`` makes the README's
screenshot with another model.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

sync_api = pytest.importorskip("playwright.sync_api")
import httpx  # noqa: E402

pytestmark = pytest.mark.slow  # every test here trains or starts processes

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update",
               "--disable-sync"]  # fmt: skip
SENTENCES = ["seven hundred and seventy-one", "twelve"]
WAIT_MS = 60_000  # generous: the machine may be busy with other work
sync_api.expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium, installed through apt if it is missing and we may (root, apt-get)."""
    if not CHROMIUM.exists():
        why_not = _install_chromium()
        if why_not:
            pytest.skip(f"no browser for the page test: {why_not}")
    return CHROMIUM


def _install_chromium() -> str | None:
    """Runs apt-get install chromium (after apt-get update if needed); returns why it could not."""
    if shutil.which("apt-get") is None:
        return f"{CHROMIUM} is missing and there is no apt-get to install it"
    if os.geteuid() != 0:
        return f"{CHROMIUM} is missing; install it as root with: apt-get install chromium"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "chromium"]
    said = ""
    for command in (install, ["apt-get", "update", "-q"], install):
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return f"{' '.join(command)} took more than 15 minutes"
        said = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        if CHROMIUM.exists():
            return None
    return f"apt-get install chromium failed: {said[0]}"


def test_the_page_translates_and_shows_attention(
    chromium, numbers_model, server_process, request, tmp_path
):
    model = request.config.getoption("--serve-model") or numbers_model
    _, url = server_process(model)
    api = httpx.Client(base_url=url, timeout=60)
    beam = api.get("/info").json()["decode"]["beam_size"]
    expected = api.post("/translate", json={"sentences": SENTENCES, "beam_size": beam}).json()
    attention = api.post("/attention", json={"sentence": SENTENCES[0], "beam_size": beam}).json()

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 900})
        page.set_default_timeout(WAIT_MS)
        asked, problems = [], []
        page.on("request", lambda r: asked.append(r.url))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.goto(f"{url}/")
        sync_api.expect(page.locator("#model")).to_contain_text("parameters")
        sync_api.expect(page.locator("#key-row")).to_be_hidden()  # this server has no key

        # Type, and translate from the keyboard (Ctrl+Enter in the text box).
        page.locator("#source").fill("\n".join(SENTENCES))
        page.locator("#source").press("Control+Enter")
        results = page.locator("#results .translation .text")
        sync_api.expect(results).to_have_count(len(SENTENCES))
        want = [t["text"] or "(empty)" for t in expected["translations"]]
        assert results.all_inner_texts() == want

        # Keyboard: the second translation is a button that Enter opens.
        page.locator("#results .translation").nth(1).focus()
        page.keyboard.press("Enter")
        sync_api.expect(page.locator("#attention")).to_be_visible()
        sync_api.expect(page.locator("#attention-sentence")).to_contain_text(SENTENCES[1])

        # Mouse: click the first one; its heatmap has tokens on both axes.
        page.locator("#results .translation").first.click()
        sync_api.expect(page.locator("#attention-sentence")).to_contain_text(SENTENCES[0])
        columns = page.locator("#heatmap thead th")
        sync_api.expect(columns).to_have_count(len(attention["source_tokens"]))
        assert columns.all_inner_texts() == attention["source_tokens"]
        rows = page.locator("#heatmap tbody tr")
        assert rows.count() == len(attention["target_tokens"])
        assert page.locator("#heatmap tbody th").all_inner_texts() == [
            *attention["target_tokens"][1:], "</s>"
        ]  # fmt: skip
        cells = page.locator("#heatmap tbody td")
        assert cells.count() == len(attention["source_tokens"]) * len(attention["target_tokens"])
        page.locator("#head").select_option("0")  # one head instead of their mean
        assert cells.count() == len(attention["source_tokens"]) * len(attention["target_tokens"])
        page.locator("#head").select_option("-1")

        shot = tmp_path / "serve.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        if request.config.getoption("--screenshot"):
            shutil.copyfile(shot, request.config.getoption("--screenshot"))

        # Phone width: nothing sticks out sideways (the heatmap scrolls inside its box).
        page.set_viewport_size({"width": 375, "height": 800})
        width = page.evaluate("document.documentElement.scrollWidth")
        assert problems == []

        # An error about a sentence names the line the person typed it on (empty lines count).
        page.locator("#source").fill("twelve\n\n" + "seven " * 200)
        page.locator("#translate").click()
        sync_api.expect(page.locator("#status")).to_contain_text("line 3:")
        browser.close()

    assert width <= 375
    assert all("status of 422" in p for p in problems), problems  # the refusal, and nothing else
    assert asked and all(u.startswith(url) or u.startswith("data:") for u in asked)  # no CDN


def test_the_page_asks_for_the_api_key_of_a_server_that_has_one(
    chromium, numbers_model, server_process
):
    _, url = server_process(numbers_model, "--api-key", "open-sesame")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 375, "height": 800})  # a phone
        page.set_default_timeout(WAIT_MS)
        page.goto(f"{url}/")
        sync_api.expect(page.locator("#key-row")).to_be_visible()  # /info answered 401
        sync_api.expect(page.locator("#status")).to_contain_text("API key")
        page.locator("#source").fill("twelve")
        page.locator("#key").fill("wrong")
        page.locator("#translate").click()
        sync_api.expect(page.locator("#status")).to_contain_text("API key")
        sync_api.expect(page.locator("#results .translation")).to_have_count(0)
        page.locator("#key").fill("open-sesame")
        page.locator("#key").press("Enter")  # submits the form from the keyboard
        sync_api.expect(page.locator("#results .translation")).to_have_count(1)
        browser.close()
