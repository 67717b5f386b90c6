"""A real headless Chromium driven over the DevTools protocol, with the standard library only.

Chromium's ``--remote-debugging-pipe`` reads JSON commands (NUL-terminated) on file descriptor 3 and writes
answers and events on descriptor 4, so no WebSocket client is needed. ``Browser`` opens a page, waits for it,
evaluates JavaScript, sends real mouse events and takes screenshots: enough to check a page as a person would.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def find_chromium() -> str | None:
    """The browser to use: $SST_CHROMIUM, else the first of the usual names on PATH."""
    chosen = os.environ.get("SST_CHROMIUM")
    if chosen:
        return chosen if shutil.which(chosen) else None
    return next((path for name in CANDIDATES if (path := shutil.which(name))), None)


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless browser with one tab; use as a context manager."""

    def __init__(self, executable: str, width: int = 1280, height: int = 900, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="sst-chromium-")
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def child_fds() -> None:  # the protocol's fixed descriptors: 3 = commands in, 4 = answers out
            a, b = os.dup(commands_read), os.dup(answers_write)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [
            executable, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", "--no-first-run", "--no-default-browser-check", "--mute-audio",
            "--allow-file-access-from-files", "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}", "about:blank",
        ]  # fmt: skip
        self._process = subprocess.Popen(
            args,
            pass_fds=(3, 4),
            preexec_fn=child_fds,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
            attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)
            self._session = attached["sessionId"]
            self.call("Page.enable")
            self.call("Runtime.enable")
            metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            self.call("Emulation.setDeviceMetricsOverride", metrics)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------------------------------- protocol
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("the browser did not answer in time")
            ready, _, _ = select.select([self._answers], [], [], left)
            if ready:
                chunk = os.read(self._answers, 1 << 20)
                if not chunk:
                    raise BrowserError("the browser closed the connection")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(line)

    def call(self, method: str, params: dict | None = None, *, session: bool = True) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})
            if "method" in answer:
                self._events.append(answer)

    # ---------------------------------------------------------------------------------------------- page
    def evaluate(self, expression: str, *, wait: bool = True) -> Any:
        """The value of a JavaScript expression (promises awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": wait})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(details.get("exception", {}).get("description") or details.get("text"))
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for: {expression}")
            time.sleep(0.05)

    def open(self, url: str) -> None:
        """Navigate and wait until the document and every image it asked for have loaded (or failed)."""
        self.call("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete' && document.URL !== 'about:blank'")

    def mouse(self, kind: str, x: float, y: float, buttons: int = 1) -> None:
        event = {"type": kind, "x": x, "y": y, "button": "left", "buttons": buttons, "clickCount": 1}
        self.call("Input.dispatchMouseEvent", event)

    def drag(self, start: tuple[float, float], end: tuple[float, float], steps: int = 8) -> None:
        """Press the left button at ``start``, move to ``end`` in steps, release: a person's drag."""
        self.mouse("mouseMoved", *start, buttons=0)
        self.mouse("mousePressed", *start)
        for i in range(1, steps + 1):
            t = i / steps
            self.mouse("mouseMoved", start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1]))
        self.mouse("mouseReleased", *end, buttons=0)

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            clip = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
            params.update(captureBeyondViewport=True, clip=clip)
        data = self.call("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    # --------------------------------------------------------------------------------------------- close
    def close(self) -> None:
        try:
            if self._process.poll() is None:
                with contextlib.suppress(BrowserError, OSError):
                    self.call("Browser.close", session=False)
                try:
                    self._process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
        finally:
            for fd in (self._commands, self._answers):
                with contextlib.suppress(OSError):
                    os.close(fd)
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
