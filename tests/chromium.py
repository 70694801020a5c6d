"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON
messages separated by NUL bytes on file descriptors 3 and 4), for tests that click and read pages.

No websocket client or browser-automation package is needed; the browser is Debian's ``chromium``.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--disable-quic", "--hide-scrollbars",
         "--window-size=1280,1400"]


def find_chromium() -> str:
    """The browser executable; fails under CI (the Makefile's .system stamp installs it), else skips."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI"):
        pytest.fail("chromium is not installed (CI must install the Debian package `chromium`)")
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


class Browser:
    """One headless Chromium with one page; ``call`` sends a command to the page and returns its result."""

    def __init__(self, profile: Path, timeout: float = 60) -> None:
        self.timeout = timeout
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
        high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)

        def fds() -> None:
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [find_chromium(), *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4, high_r, high_w), preexec_fn=fds, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in (to_chrome_r, from_chrome_w, high_r, high_w):
            os.close(fd)
        self.out = os.fdopen(to_chrome_w, "wb", buffering=0)
        self.inp = os.fdopen(from_chrome_r, "rb", buffering=0)
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session: str | None = None
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable")

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            chunk = self.inp.read(65536)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        data: dict[str, Any] = json.loads(message)
        return data

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.out.write(json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """A command to the page's session."""
        return self._send(method, params, self.session)

    def evaluate(self, expression: str) -> Any:
        """A JavaScript expression's value (promises awaited)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None) -> Any:
        """Poll a JavaScript expression until it is truthy; returns its value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError:  # the page is navigating: its context is gone for a moment
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expression}")

    def goto(self, url: str) -> None:
        """Open a URL and wait until the document has loaded."""
        self.call("Page.navigate", {"url": url})
        self.wait_for(f"location.href === {json.dumps(url)} && document.readyState === 'complete'")

    def screenshot(self) -> bytes:
        """A PNG of the viewport."""
        return base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and failed loads seen so far."""
        out = []
        for ev in self.events:
            method, params = ev["method"], ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                out.append(str(params.get("exceptionDetails", {}).get("exception", {}).get("description")))
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                out.append(str(params.get("args")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                out.append(str(params["entry"].get("text")) + " " + str(params["entry"].get("url")))
            elif method == "Network.loadingFailed":
                out.append(f"load failed: {params.get('errorText')}")
        return out

    def requested(self) -> list[str]:
        """Every URL the page requested."""
        return [ev["params"]["request"]["url"] for ev in self.events if ev["method"] == "Network.requestWillBeSent"]

    def close(self) -> None:
        try:
            self._send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        self.inp.close()
