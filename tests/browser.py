"""Headless Chromium driven over the DevTools protocol, for tests of HTML pages (the report).

`Chromium` starts Debian's `chromium` in its own process group with a fresh profile and a
DevTools port the browser picks (`--remote-debugging-port=0`, read back from the profile's
`DevToolsActivePort` file), talks to its page over a websocket (websocket-client), records
the page's console errors and exceptions, and kills the whole group when closed.

Run as a program, it regenerates the screenshot of the embedded dataset's report that the
docs show (docs/report.md):

    PYTHONPATH=. .venv/bin/python -m tests.browser docs/report.png
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

import websocket

CHROMIUM = 'chromium'
_START_TIMEOUT_S = 60.0
_CALL_TIMEOUT_S = 60.0


class ChromiumError(RuntimeError):
    """Chromium did not start, or a DevTools call failed."""


class Chromium:
    """One headless Chromium with one page; use as a context manager (it kills the browser).

    Args:
      profile_dir: An empty directory for the browser's profile.
      width_px: The page's viewport width.
      height_px: The page's viewport height.
    """

    def __init__(self, profile_dir: pathlib.Path, *, width_px: int = 1200, height_px: int = 900):
        executable = shutil.which(CHROMIUM)
        if executable is None:
            raise ChromiumError(f"{CHROMIUM} is not on PATH (make installs Debian's package).")
        self.events: list[dict] = []
        self._ids = itertools.count(1)
        self._log = open(profile_dir / 'chromium.log', 'w+b')  # noqa: SIM115  (closed in close)
        command = [
            executable,
            '--headless=new',
            '--remote-debugging-port=0',
            f'--user-data-dir={profile_dir}',
            f'--window-size={width_px},{height_px}',
            '--no-first-run',
            '--no-default-browser-check',
            '--disable-gpu',
            '--disable-extensions',
            '--hide-scrollbars',
            *(['--no-sandbox'] if os.geteuid() == 0 else []),  # Chromium refuses root else.
            'about:blank',
        ]
        self._process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            start_new_session=True,  # Its own process group: `close` kills every child.
        )
        self._socket = None
        try:
            port = self._wait_for_port(profile_dir / 'DevToolsActivePort')
            self._socket = websocket.create_connection(
                self._find_page(port), timeout=_CALL_TIMEOUT_S, suppress_origin=True
            )
        except BaseException:
            self.close()
            raise

    def _wait_for_port(self, path: pathlib.Path) -> int:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ChromiumError(
                    f'chromium exited with {self._process.returncode}: {self.log()}'
                )
            lines = path.read_text().split('\n') if path.exists() else []
            if len(lines) >= 2 and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise ChromiumError(
            f'chromium opened no DevTools port in {_START_TIMEOUT_S} s: {self.log()}'
        )

    def _find_page(self, port: int) -> str:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f'http://127.0.0.1:{port}/json/list', timeout=10) as r:
                pages = [t for t in json.load(r) if t.get('type') == 'page']
            if pages:
                return pages[0]['webSocketDebuggerUrl']
            time.sleep(0.05)
        raise ChromiumError('chromium has no page target.')

    def log(self) -> str:
        """Returns what Chromium printed on stderr."""
        self._log.seek(0)
        return self._log.read().decode(errors='replace')[-2000:]

    def call(self, method: str, **params: Any) -> dict:
        """Sends one DevTools command; returns its result (events that arrive are recorded)."""
        call_id = next(self._ids)
        self._socket.send(json.dumps({'id': call_id, 'method': method, 'params': params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get('id') == call_id:
                if 'error' in message:
                    raise ChromiumError(f'{method}: {message["error"]}')
                return message.get('result', {})
            if 'method' in message:
                self.events.append(message)

    def wait_for_event(self, method: str, timeout_s: float = _CALL_TIMEOUT_S) -> dict:
        """Returns the first recorded (or next) event named `method`."""
        deadline = time.monotonic() + timeout_s
        while True:
            for event in self.events:
                if event['method'] == method:
                    return event
            if time.monotonic() > deadline:
                raise ChromiumError(f'no {method} event in {timeout_s} s')
            message = json.loads(self._socket.recv())
            if 'method' in message:
                self.events.append(message)

    def open(self, url: str) -> None:
        """Loads `url` with the Runtime, Log and Page domains on; returns once it has loaded."""
        for domain in ('Runtime', 'Log', 'Page'):
            self.call(f'{domain}.enable')
        self.events.clear()
        self.call('Page.navigate', url=url)
        self.wait_for_event('Page.loadEventFired')

    def evaluate(self, expression: str) -> Any:
        """Returns the value of a JavaScript expression in the page (JSON-serializable)."""
        result = self.call('Runtime.evaluate', expression=expression, returnByValue=True)
        if 'exceptionDetails' in result:
            raise ChromiumError(f'{expression}: {result["exceptionDetails"]}')
        return result['result'].get('value')

    def errors(self) -> list[dict]:
        """The page's errors so far: exceptions, console errors and error log entries."""
        self.call('Runtime.evaluate', expression='0')  # Collects events sent until now.
        found = []
        for event in self.events:
            method, params = event['method'], event.get('params', {})
            console_error = method == 'Runtime.consoleAPICalled' and params.get('type') == 'error'
            log_error = method == 'Log.entryAdded' and params['entry'].get('level') == 'error'
            if method == 'Runtime.exceptionThrown' or console_error or log_error:
                found.append(event)
        return found

    def screenshot(self, *, width_px: int, max_height_px: int) -> bytes:
        """Returns a PNG of the page, `width_px` wide, as tall as the page (at most the max)."""
        metrics = self.call('Page.getLayoutMetrics')
        height = min(int(metrics['cssContentSize']['height']) + 1, max_height_px)
        self.call(
            'Emulation.setDeviceMetricsOverride',
            width=width_px,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = self.call('Page.captureScreenshot', format='png')
        return base64.b64decode(shot['data'])

    def close(self) -> None:
        """Closes the connection and kills Chromium's process group; waits for it to end."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        # Chromium's helpers (zygote, renderers, GPU) share its process group: kill them all.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                break  # None is left.
            time.sleep(0.05)
        self._log.close()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def make_screenshot(
    out: pathlib.Path,
    *,
    data: pathlib.Path | None = None,
    width_px: int = 1200,
    max_height_px: int = 2400,
) -> None:
    """Writes a PNG of the report of `data` (default: the embedded CartPole dataset) to `out`.

    The report is written by the command line (`rlds-reverb report DATA --out ...`), so the
    picture shows what users get.

    Raises:
      ChromiumError: If Chromium fails, or the page logs an error or has an image that did
        not load.
    """
    from rlds_reverb import cli

    with tempfile.TemporaryDirectory() as work:
        page = pathlib.Path(work) / 'report.html'
        source = [] if data is None else [str(data)]
        code = cli.main(['report', *source, '--out', str(page), '--no-progress'])
        if code:
            raise ChromiumError(f'rlds-reverb report exited with {code}')
        profile = pathlib.Path(work) / 'profile'
        profile.mkdir()
        with Chromium(profile, width_px=width_px) as browser:
            browser.open(page.as_uri())
            broken = browser.evaluate(
                'Array.from(document.images).filter(i => !i.naturalWidth).map(i => i.alt)'
            )
            if browser.errors() or broken:
                raise ChromiumError(f'the report has errors {browser.errors()}, images {broken}')
            out.write_bytes(browser.screenshot(width_px=width_px, max_height_px=max_height_px))


if __name__ == '__main__':
    make_screenshot(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else 'docs/report.png'))
