"""A real `agl serve` as a subprocess on a free port, for tests that talk to it over HTTP.

Needs agl built (`npx tsc -p tsconfig.json`: dist/) and the project's Node 24 (node_modules);
without them the tests that use it fail, saying what to run (`npm test` builds and installs both).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "dist" / "src" / "runtime" / "cli.js"
STARTUP_SECONDS = 60  # a guard against a server that never starts, not a measurement
SERVING = re.compile(r"serving on (http://\S+),")


def project_node() -> str:
    """The Node the project pins (node_modules' own), else one on PATH; fails the test without Node 22.15+."""
    if not CLI.is_file():
        pytest.fail(f"agl is not built ({CLI.relative_to(ROOT)} is missing): run `npx tsc -p tsconfig.json`")
    candidates = [ROOT / "node_modules" / "node" / "bin" / "node", ROOT / "node_modules" / ".bin" / "node"]
    node = next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), shutil.which("node"))
    if node is None:
        pytest.fail("no node: run `npm ci` (the project's Node is node_modules/node)")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    major, minor = (int(part) for part in version.strip().lstrip("v").split(".")[:2])
    if (major, minor) < (22, 15):
        pytest.fail(f"{node} is Node {version.strip()}; agl needs Node 22.15 or later: run `npm ci` (node_modules/node)")
    return node


@contextmanager
def agl_serve(db: Path, *options: str, port: int = 0) -> Iterator[str]:
    """`agl serve` with ``options`` on ``port`` (0: one the system picks), storing in ``db``; yields its URL, stops it after."""
    args = [project_node(), str(CLI), "serve", "--port", str(port), "--grpc-port", "0", "--db", str(db), "--quiet", *options]
    process = subprocess.Popen(args, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        yield wait_for_url(process)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_url(process: subprocess.Popen[str]) -> str:
    """The URL of the server's "serving on" line; fails with its output when it ends or stays silent."""
    assert process.stdout is not None
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if SERVING.search(line):
                found.set()
        found.set()  # ended: the wait is over either way

    threading.Thread(target=read, daemon=True).start()
    found.wait(timeout=STARTUP_SECONDS)
    url = next((m.group(1) for m in map(SERVING.search, lines) if m), None)
    assert url is not None, "agl serve never said it was serving:\n" + "\n".join(lines[-40:])
    return url
