"""The notebooks as a student sees them: JupyterLab in headless Chromium, driven by Playwright.

- A fresh working copy of 01: Run All stops at the first exercise's check, with NotImplementedError, and
  nowhere else.
- The solved source notebooks of ``IN_THE_BROWSER`` (the others run under nbclient, tests/instructor/test_release.py):
  Run All runs every cell without an error, every cell that shows a figure shows it, and every hidden test
  passes.
- The Chinese Markdown is drawn with a CJK font: asked of the browser (the fonts it really used for the
  text), not assumed.

Uses the system's Chromium (``.ci/run`` installs it, with a CJK font, when missing). A Run All is over when
the notebook's kernel is idle with no cell queued; a failure names the cells that failed or did not run, and
the screenshot it saved.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from autograder.engine.assignments import ASSIGNMENTS
from autograder.instructor.release import build_source_notebook, source_file
from course.tools.workspace import copy_notebooks
from tests.chromium import CHROMIUM, answers, free_port, launched
from tests.notebooks import IN_THE_BROWSER, released_path

pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="needs the system's Chromium (.ci/run installs it)")]
TOKEN = "attention-course-browser-test"
RUN_ALL_SECONDS = 240  # only for a kernel still busy: a Run All that stopped is seen at once
START_SECONDS = 15  # from the click on Run All to the first cell queued or run
# JupyterLab settings: every cell in the DOM (no windowing), no news or update checks.
SETTINGS = {"@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
            "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
                {"fetchNews": "false", "checkForUpdates": False}}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server over a folder with a fresh working copy of 01 and the solved notebooks to run here."""
    root = tmp_path_factory.mktemp("lab")
    copy_notebooks(released_path().parent.parent, root / "work")
    for assignment in IN_THE_BROWSER:
        target = root / "solved" / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        nbformat.write(build_source_notebook(source_file(assignment), assignment), target)
    settings = tmp_path_factory.mktemp("lab-settings")
    for name, values in SETTINGS.items():
        path = settings / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding="utf-8")
    port = free_port()
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(settings),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path_factory.mktemp("lab-workspaces")),
           "JUPYTER_CONFIG_DIR": str(tmp_path_factory.mktemp("jupyter-config"))}
    log = (root / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
                               "--ip=127.0.0.1", f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}"],
                              cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    if not answers(f"{url}/api/status?token={TOKEN}", server, 60):
        server.kill()
        pytest.fail(f"JupyterLab did not start; its log: {root / 'server.log'}")
    yield url, root
    server.terminate()
    server.wait(timeout=30)
    log.close()


@pytest.fixture(scope="module")
def browser():
    with launched() as chromium:
        yield chromium


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("browser-screenshots")


def open_notebook(browser, lab, relative: str):
    url, _ = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    # ?reset: a fresh workspace, so the notebook opened by an earlier test does not come back in another tab.
    page.goto(f"{url}/lab/tree/{relative}?reset&token={TOKEN}", wait_until="domcontentloaded", timeout=120_000)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell", timeout=120_000)
    # The page's own kernel, connected and idle ("Python 3 (ipykernel) | Idle" in the status bar): a Run All clicked
    # sooner asks which kernel to start. (The toolbar's indicator says "idle" before that, with "No Kernel"; the
    # server's view may be an earlier test's session of the same notebook.)
    page.wait_for_function("() => [...document.querySelectorAll('#jp-main-statusbar .jp-StatusBar-TextItem')]"
                           ".some(e => / \\| Idle$/.test(e.innerText) && !e.innerText.startsWith('No Kernel'))",
                           timeout=120_000)
    return page


def run_all(page) -> None:
    """Run → Run All Cells, through the menu a student would use."""
    page.locator(".lm-MenuBar-item", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-item[data-command='runmenu:run-all']").click()


CELLS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')].map(cell => ({
    code: cell.classList.contains('jp-CodeCell'),
    source: cell.querySelector('.cm-content') ? cell.querySelector('.cm-content').innerText : '',
    prompt: cell.querySelector('.jp-InputArea-prompt') ? cell.querySelector('.jp-InputArea-prompt').innerText : '',
    errors: [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
        .map(e => e.innerText).filter(t => /Error|Traceback/.test(t)),
    images: cell.querySelectorAll('.jp-OutputArea-output img').length,
    text: [...cell.querySelectorAll('.jp-OutputArea-output')].map(e => e.innerText).join('\\n'),
}))"""


def cells(page) -> list[dict]:
    return page.evaluate(CELLS)


def kernel_state(lab, relative: str) -> str | None:
    """The execution state ("busy", "idle", ...) of the kernel of the notebook at ``relative``, from the server."""
    url, _ = lab
    with urllib.request.urlopen(f"{url}/api/sessions?token={TOKEN}", timeout=10) as answer:
        sessions = json.load(answer)
    return next((s["kernel"]["execution_state"] for s in sessions if s["path"] == relative), None)


def _executed(cell: dict) -> bool:
    return bool(re.search(r"\[\d+\]", cell["prompt"]))


def _queued(cell: dict) -> bool:
    return "*" in cell["prompt"]  # [*]: running, or waiting for the cells before it


def run_to_the_end(page, lab, relative: str, shot: Path) -> list[dict]:
    """Run All, and the cells once it is over: it has begun (a cell queued or run), no cell is queued any
    more (JupyterLab clears the queue at an error), and the kernel is idle (the last outputs are in)."""
    run_all(page)
    clicked = time.monotonic()
    begun, asked = False, ""
    while time.monotonic() < clicked + RUN_ALL_SECONDS:
        found = cells(page)
        queued = [i for i, c in enumerate(found) if _queued(c)]
        begun = begun or bool(queued) or any(_executed(c) for c in found)
        if begun and not queued and kernel_state(lab, relative) == "idle":
            page.screenshot(path=str(shot), full_page=True)
            return found
        if not begun and time.monotonic() > clicked + START_SECONDS:
            dialog = page.locator(".jp-Dialog")  # JupyterLab asks something instead: say what, do not answer
            asked = dialog.first.inner_text() if dialog.count() else ""
            break
        time.sleep(0.5)
    page.screenshot(path=str(shot), full_page=True)
    state = "was still running" if begun else "did not start"
    ran = [i for i, c in enumerate(found) if _executed(c)]
    pytest.fail(f"Run All of {relative} {state} after {time.monotonic() - clicked:.0f} s (cells queued: {queued}, "
                f"cells run: {ran} of {len(found)}, kernel: {kernel_state(lab, relative)}"
                f"{f'; JupyterLab asks: {asked!r}' if asked else ''}); screenshot: {shot}")


def not_run(found: list[dict]) -> list[int]:
    """The code cells Run All did not run (JupyterLab does not run an empty cell)."""
    return [i for i, c in enumerate(found) if c["code"] and c["source"].strip() and not _executed(c)]


def test_run_all_on_a_fresh_working_copy_stops_at_the_first_exercise(browser, lab, screenshots):
    relative = f"work/{released_path().parent.name}/{released_path().name}"
    page = open_notebook(browser, lab, relative)
    shot = screenshots / "fresh-01.png"
    found = run_to_the_end(page, lab, relative, shot)
    failing = [i for i, c in enumerate(found) if c["errors"]]
    assert len(failing) == 1, f"errors in cells {failing}; screenshot: {shot}"
    first = failing[0]
    assert "NotImplementedError" in found[first]["errors"][0], found[first]["errors"][0][-500:]
    assert 'check("attention_scores")' in found[first]["source"], "the stop is not the first exercise's check"
    later = [c for c in found[first + 1:] if c["code"]]
    assert later and not any(_executed(c) for c in later), "Run All went on after the first error"
    page.close()


@pytest.mark.parametrize("assignment", IN_THE_BROWSER)
def test_every_cell_of_a_solved_notebook_runs_and_shows_its_figures(browser, lab, screenshots, assignment):
    relative = f"solved/{assignment}/{assignment}.ipynb"
    page = open_notebook(browser, lab, relative)
    shot = screenshots / f"solved-{assignment}.png"
    found = run_to_the_end(page, lab, relative, shot)
    errors = [(i, c["errors"][0][-300:]) for i, c in enumerate(found) if c["errors"]]
    assert not errors and not not_run(found), \
        f"{assignment}: errors in cells {errors}, cells not run {not_run(found)}; screenshot: {shot}"
    missing = [i for i, c in enumerate(found) if "plt.show()" in c["source"] and c["images"] == 0]
    assert not missing, f"cells {missing} of {assignment} show no figure; screenshot: {shot}"
    assert sum(c["images"] for c in found) >= 1
    printed = "\n".join(c["text"] for c in found)
    for exercise in ASSIGNMENTS[assignment]:  # the hidden tests graded the solution, in this kernel
        assert f"✓ {exercise.name}：通过" in printed, f"{exercise.name} did not pass; screenshot: {shot}"
    page.close()


def test_chinese_markdown_is_drawn_with_a_cjk_font(browser, lab, screenshots):
    page = open_notebook(browser, lab, f"work/{released_path().parent.name}/{released_path().name}")
    heading = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1").first
    heading.wait_for(timeout=60_000)
    assert re.search(r"[\u4e00-\u9fff]", heading.inner_text()), heading.inner_text()
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": ".jp-NotebookPanel:not(.lm-mod-hidden) "
                                                                        ".jp-RenderedMarkdown h1"})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    shot = screenshots / "heading-font.png"
    heading.screenshot(path=str(shot))
    cjk = [f for f in fonts if re.search(r"CJK|Han|Hei|Song|Ming|Noto Sans SC|PingFang|YaHei", f["familyName"])]
    assert cjk and sum(f["glyphCount"] for f in cjk) > 0, \
        f"the heading's Chinese was drawn with {fonts} — no CJK font (install fonts-noto-cjk); screenshot: {shot}"
    page.close()
