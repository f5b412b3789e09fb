"""The system's Chromium as the browser tests drive it (through Playwright's executable_path: Playwright's own
browser download cannot work here), and a free local port for the servers they start and a wait for them."""
import contextlib
import shutil
import socket
import subprocess
import time
import urllib.request

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Chromium on a closed network, as root in CI: no sandbox, no background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str, server: subprocess.Popen, seconds: float) -> bool:
    """Whether ``url`` answers (any status but an error) before ``seconds`` pass or ``server`` exits."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=2)
            return True
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                return False
            time.sleep(0.5)


@contextlib.contextmanager
def launched():
    """Headless Chromium, driven through Playwright; closed at the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()
