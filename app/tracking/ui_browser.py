"""Headless Chromium driven over the DevTools protocol on a pipe (stdlib only, no websocket).

`--screenshot` takes its picture after a fixed virtual-time budget: MLflow's charts, drawn after
their metric histories arrive, were still spinners in it. Here the page is polled until it says
it is ready (a JavaScript expression), a clean-up expression runs (closing a side panel), and
only then is the screenshot taken. Chromium reads commands, NUL-terminated JSON, from fd 3 and
writes answers and events to fd 4 (`--remote-debugging-pipe`).
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

POLL_S = 0.5


class BrowserError(RuntimeError):
    """Chromium did not answer, or the page never became ready; the message says which."""


class Chromium:
    """One headless Chromium with one page, for `with` blocks."""

    def __init__(self, binary: str, width: int = 1440, height: int = 1000) -> None:
        self.binary, self.width, self.height = binary, width, height
        self.next_id, self.buffer, self.session = 0, b"", None

    def __enter__(self) -> Chromium:
        to_browser, self.commands = os.pipe()  # chromium reads fd 3
        self.answers, from_browser = os.pipe()  # chromium writes fd 4

        def fds() -> None:
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        args = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        args += [f"--window-size={self.width},{self.height}", "--remote-debugging-pipe"]
        self.proc = subprocess.Popen(
            [self.binary, *args, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=fds,
            pass_fds=(3, 4),
            start_new_session=True,
        )
        os.close(to_browser)
        os.close(from_browser)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attach = {"targetId": target, "flatten": True}
        self.session = self.call("Target.attachToTarget", attach)["sessionId"]
        self.call("Page.enable")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(10)
        os.close(self.commands)
        os.close(self.answers)

    def call(self, method: str, params: dict | None = None, timeout: float = 60.0) -> Any:
        """Send one command; return its result (events on the way are skipped)."""
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session is not None:
            msg["sessionId"] = self.session
        os.write(self.commands, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._message(deadline))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})

    def _message(self, deadline: float) -> bytes:
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.answers], [], [], left)[0]:
                raise BrowserError("chromium did not answer in time")
            data = os.read(self.answers, 1 << 20)
            if not data:
                raise BrowserError("chromium exited")
            self.buffer += data
        message, self.buffer = self.buffer.split(b"\0", 1)
        return message

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        return result.get("result", {}).get("value")

    def open_when_ready(self, url: str, ready: str, timeout: float) -> None:
        """Load `url`, then poll until the JavaScript `ready` is true; BrowserError if never."""
        self.call("Page.navigate", {"url": url})
        self.wait_until(ready, timeout)

    def wait_until(self, ready: str, timeout: float) -> None:
        """Poll the loaded page until the JavaScript `ready` is true; BrowserError if never."""
        deadline = time.monotonic() + timeout
        while not self.evaluate(ready):
            if time.monotonic() > deadline:
                raise BrowserError(f"the page was not ready after {timeout:.0f} s: {ready}")
            time.sleep(POLL_S)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def dom(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))
