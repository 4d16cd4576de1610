"""TensorBoard in a real browser: a TensorBoard server on a log folder, and headless Chromium driven
through the DevTools protocol to read what its pages render and to take screenshots.

The protocol runs over `--remote-debugging-pipe` (file descriptors 3 and 4, NUL-separated JSON), so
no websocket client is needed. TensorBoard's dashboards are web components: their text lives in
shadow roots, which `chromium --dump-dom` leaves out, hence a script that walks them.

    PYTHONPATH=. .venv/bin/python tests/experiments/analysis/tb_browser.py DIR [--out PNG]

screenshots the cell-comparison charts (the Custom Scalars tab) of the sweep in DIR (`DIR/_summary`,
written by `cli.py report DIR`) into DIR/tensorboard.png. Needs Debian's `chromium` package.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from experiments.records.events import read_scalars
from experiments.records.layout import SUMMARY_DIR

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--hide-scrollbars", "--mute-audio", "--no-proxy-server",
    "--remote-debugging-pipe",
)  # fmt: skip
_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # TensorBoard is local: never a proxy

# `deep(root)`: every element under `root` (the page by default), shadow roots included
DEEP = """
  const deep = (root) => {
    const out = [];
    const walk = (node) => {
      out.push(node);
      if (node.shadowRoot) walk(node.shadowRoot);
      for (const child of node.children || []) walk(child);
    };
    const start = root || document.documentElement;
    if (start) walk(start);
    return out;
  };
  const texts = (root) => deep(root)
    .filter((e) => !e.shadowRoot && !e.children.length && !['style', 'script'].includes(e.localName))
    .map((e) => e.textContent.trim()).filter((t) => t);
"""


def _script(body: str) -> str:
    """JavaScript `body` (which returns a value) with `deep` and `texts`, in a function of its own so that
    evaluating it again redeclares nothing."""
    return "(() => {" + DEEP + body + "})()"


# Custom Scalars: each margin chart card in page order: its title, value tags, the series it has drawn
# (one per run with data), whether it reports missing tags or mismatched steps, whether it has a plot,
# and the text it renders (its title, "Matches (n)").
MARGIN_CHARTS = _script("""
  return deep().filter((e) => e.localName === 'tf-custom-scalar-margin-chart-card').map((card) => ({
    title: card.title,
    tags: (card.marginChartSeries || []).map((s) => s.value),
    series: card._seriesNames || [],
    missing: (card._missingTags || []).length,
    mismatch: Boolean(card._stepsMismatch),
    drawn: deep(card.shadowRoot).some((e) => e.localName === 'svg'),
    text: texts(card.shadowRoot),
  }));
""")
# HParams: the session table's columns and rows, and the text it renders (headers and cells).
HPARAMS_TABLE = _script("""
  const table = deep().find((e) => e.localName === 'tf-hparams-table-view');
  if (!table) return null;
  const schema = table.visibleSchema || {hparamInfos: [], metricInfos: []};
  return {
    hparams: schema.hparamInfos.map((i) => i.displayName || i.name),
    metrics: schema.metricInfos.map((i) => i.displayName || i.name.tag),
    rows: (table.sessionGroups || []).length,
    text: texts(table),
  };
""")
# Any page: the text it renders (Time Series: group names and card titles among it).
PAGE_TEXT = _script("return texts();")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def tensorboard(logdir: Path, timeout: float = 120.0) -> Iterator[str]:
    """A TensorBoard server on `logdir` for the duration of the block; yields its URL once it lists runs."""
    port = free_port()
    # --load_fast false: TensorBoard's Python reader, no second process (its Rust data server) to start
    command = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
               "--port", str(port), "--load_fast", "false"]  # fmt: skip
    log = tempfile.TemporaryFile()
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError):
                with _LOCAL.open(f"{url}/data/runs", timeout=5) as response:
                    if json.loads(response.read()):
                        break
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"TensorBoard did not serve {logdir}:\n{log.read().decode(errors='replace')}")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def plugin_enabled(url: str, plugin: str, timeout: float = 120.0) -> None:
    """Waits until the TensorBoard at `url` has read the data that enables `plugin` (its dashboard)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError):
            with _LOCAL.open(f"{url}/data/plugins_listing", timeout=5) as response:
                if json.loads(response.read()).get(plugin, {}).get("enabled"):
                    return
        if time.monotonic() > deadline:
            raise RuntimeError(f"TensorBoard at {url} did not enable its {plugin} dashboard in {timeout:.0f} s")
        time.sleep(0.5)


class Chromium:
    """Headless Chromium with one page, driven over the DevTools protocol.

    Args:
        binary: the browser.
        width, height: the page's viewport in CSS pixels.
    """

    def __init__(self, binary: Path = CHROMIUM, width: int = 1400, height: int = 1000):
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-")  # a fresh profile every time
        to_browser, self._commands = os.pipe()
        self._replies, from_browser = os.pipe()

        def descriptors() -> None:  # in the child: the protocol's fixed descriptors 3 (in) and 4 (out)
            a, b = os.dup(to_browser), os.dup(from_browser)
            os.dup2(a, 3)
            os.dup2(b, 4)

        command = [str(binary), *FLAGS, f"--user-data-dir={self._profile.name}", f"--window-size={width},{height}"]
        # close_fds=False: only 3 and 4 are inheritable (Python opens everything else non-inheritable)
        self._process = subprocess.Popen(
            [*command, "about:blank"], preexec_fn=descriptors, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._id = 0
        self._session = None
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        attached = self.call("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)
        self._session = attached["sessionId"]
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        self.call("Emulation.setDeviceMetricsOverride", metrics)

    def call(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60.0) -> dict:
        """Sends one protocol command and returns its result (events in between are dropped)."""
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                raise TimeoutError(f"Chromium did not answer {method} within {timeout} s")
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium exited")
            self._buffer += chunk

    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, ready: Any, timeout: float = 90.0) -> Any:
        """Evaluates `expression` until `ready(value)` holds (a JavaScript app renders after it loads);
        returns the last value, ready or not, at the timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if ready(value) or time.monotonic() > deadline:
                return value
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.call("Browser.close", session=False, timeout=10)
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._commands)
        os.close(self._replies)
        self._profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def series_expected(summary: Path) -> dict[str, int]:
    """Value tag of each margin chart -> how many runs of `summary` have it: the lines it must draw."""
    counts: dict[str, int] = {}
    for run in [p for p in summary.iterdir() if p.is_dir()]:
        for tag in read_scalars(run).curves:
            counts[tag] = counts.get(tag, 0) + 1
    return counts


def charts_ready(charts: list[dict] | None, expected: dict[str, int]) -> bool:
    """Every margin chart has drawn one line for each run that has its tags."""
    return bool(charts) and all(len(c["series"]) == sum(expected.get(t, 0) for t in c["tags"]) for c in charts)


def screenshot(sweep_dir: Path, out: Path, timeout: float = 120.0) -> list[dict]:
    """Screenshots the Custom Scalars tab of `sweep_dir`'s TensorBoard view: the cell comparison.

    Returns:
        The margin charts as rendered (see `MARGIN_CHARTS`).
    """
    summary = sweep_dir / SUMMARY_DIR
    expected = series_expected(summary)
    with tensorboard(summary) as url, Chromium(width=1500, height=1500) as browser:
        # TensorBoard lists runs while it still reads their files: a page opened before the layout is
        # read shows Custom Scalars as inactive, and stays so until reloaded
        plugin_enabled(url, "custom_scalars", timeout)
        # the means as they are: no smoothing (a setting in the URL), no band clipped as an outlier (a
        # setting in the page's local storage: set, then the page loaded again from a new URL)
        tab = "#custom_scalars&_smoothingWeight=0"
        browser.open(f"{url}/{tab}")
        browser.evaluate("localStorage.setItem('_ignoreYOutliers', 'false')")
        browser.open(f"{url}/?outliers=shown{tab}")
        charts = browser.wait_for(MARGIN_CHARTS, lambda c: charts_ready(c, expected), timeout)
        if not charts_ready(charts, expected):
            raise RuntimeError(f"the Custom Scalars charts of {summary} did not finish drawing in {timeout:.0f} s")
        time.sleep(2)  # the charts' transitions
        browser.screenshot(out)
    return charts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tb_browser", description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a sweep folder after `cli.py report DIR`")
    parser.add_argument("--out", type=Path, help="the PNG (default: DIR/tensorboard.png)")
    args = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"error: {CHROMIUM} not found (Debian: apt-get install chromium)")
        return 2
    if not (args.dir / SUMMARY_DIR).is_dir():
        print(f"error: {args.dir / SUMMARY_DIR} not found (written by `cli.py report {args.dir}`)")
        return 2
    out = args.out or args.dir / "tensorboard.png"
    try:
        charts = screenshot(args.dir, out)
    except RuntimeError as err:  # no half-drawn picture replaces a good one
        print(f"error: {err}; no screenshot written")
        return 1
    print(f"{len(charts)} charts: {', '.join(c['title'] for c in charts)}\nScreenshot: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
