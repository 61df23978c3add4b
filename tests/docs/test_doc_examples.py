"""Every example in README.md and docs/*.md runs as written, against a server this test starts.

The convention the documents keep (README.md, "Examples in these documents"):

- Every fenced block names its language: ``sh`` and ``console`` (commands),
  ``python``, ``toml`` (configuration), ``text`` (output or logs, never run).
- A block that cannot run here says so on the line before it:
  ``<!-- doc-test: skip: <the reason> -->`` (a long-running server, machines
  or fixed ports the test cannot take).
- ``sh`` blocks run whole with ``bash -e -o pipefail``; ``python`` blocks with the
  project's Python; ``console`` blocks run each ``$ command``, and the lines
  after it are the output shown. When that output is an error line
  (``mqgate...: ...``) the command must fail with that message (compared up
  to its first digit); otherwise it must succeed. ``toml`` blocks must parse
  and use only the keys docs/CONFIG.md documents.

How they are run: one `mqgate serve --data-dir ./data` per document, started
in a fresh folder holding a `.venv` link to this Python's environment (what
`make run` makes), with that folder as the working directory, the virtualenv's
`mqgate` commands (not its `python`) first on PATH, and this tree first on
PYTHONPATH. The server listens on free ports; the default ports in the
examples (9876, 10911, 1883, 8083, 18083, 8081, and 18084 for the event API) are replaced by
those, and ``NAMESRV_ADDR``, ``MQGATE_URL`` and ``MQGATE_EVENTS_URL`` point at it, so the suite can run beside a real server. Nothing else in an example is changed. Background
processes a block starts are killed with its process group when it ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from serve_process import ServeProcess, free_port

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"sh", "console", "python", "toml", "text"}
RUNNABLE = {"sh", "console", "python", "toml"}
SKIP = re.compile(r"<!--\s*doc-test:\s*skip:\s*(?P<why>.*?)\s*-->")
FENCE = re.compile(r"^(?P<fence>```|~~~)(?P<lang>[\w+-]*)\s*$")
BLOCK_TIMEOUT_S = 240  # mqgate telemetry starts Spark (a JVM) on a busy machine


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    text: str
    skip: str | None

    def __str__(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line} ({self.lang or 'no language'})"


def blocks(doc: Path) -> list[Block]:
    out: list[Block] = []
    lines = doc.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and lines[i].strip() != m["fence"]:
            body.append(lines[i])
            i += 1
        before = next((ln for ln in reversed(lines[:start]) if ln.strip()), "")
        skip = SKIP.search(before)
        out.append(Block(doc, start + 1, m["lang"], "\n".join(body) + "\n", skip["why"] if skip else None))
        i += 1
    return out


def documented_keys() -> set[str]:
    return set(re.findall(r"^\| `([A-Za-z0-9]+)` \|", (ROOT / "docs" / "CONFIG.md").read_text(), re.M))


def test_every_block_names_its_language_and_every_skip_its_reason():
    bad = [f"{b}: give the fence a language, one of {sorted(LANGUAGES)}" for d in DOCS for b in blocks(d)
           if b.lang not in LANGUAGES]
    bad += [f"{b}: a skip needs a reason a reader accepts" for d in DOCS for b in blocks(d)
            if b.skip is not None and len(b.skip) < 15]
    assert not bad, "\n".join(bad)


class Runner:
    """Runs a document's blocks in one folder against one server."""

    def __init__(self, workdir: Path, ports: dict[str, int]) -> None:
        self.workdir = workdir
        self.ports = ports
        # mqgate's commands on PATH (the docs that write a bare `mqgate` say to activate the
        # virtualenv), but not its `python`: an example must say `.venv/bin/python` to get the
        # project's packages, as a reader who did not activate it runs them
        commands = workdir / "commands"
        commands.mkdir()
        for exe in (Path(sys.prefix) / "bin").glob("mqgate*"):
            (commands / exe.name).symlink_to(exe)
        self.env = {
            **os.environ,
            "PATH": f"{commands}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            "NAMESRV_ADDR": f"127.0.0.1:{ports['namesrv']}",
            "MQGATE_URL": f"http://127.0.0.1:{ports['http']}",
            "MQGATE_EVENTS_URL": f"http://127.0.0.1:{ports['events']}",
            "MQGATE_CLIENT_OFFSET_DIR": str(workdir / "client-offsets"),
            "HOME": str(workdir),  # the C++ client keeps its files under ~
        }

    def ported(self, text: str) -> str:
        for default, name in (("9876", "namesrv"), ("10911", "broker"), ("1883", "mqtt"), ("8083", "ws"),
                              ("18083", "http"), ("8081", "grpc"), ("18084", "events")):
            text = re.sub(rf"\b{default}\b", str(self.ports[name]), text)
        return text

    def run(self, argv: list[str], stdin: str, what: str) -> subprocess.CompletedProcess:
        """Run until the command itself exits (not what it left in the background, which
        is then killed with its process group); output goes through files, which a
        background process holding them open cannot stall."""
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen(argv, cwd=self.workdir, env=self.env, stdin=subprocess.PIPE, stdout=out,
                                    stderr=err, text=True, start_new_session=True)
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
                code = proc.wait(BLOCK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
            out.seek(0)
            err.seek(0)
            result = subprocess.CompletedProcess(argv, proc.returncode, out.read(), err.read())
        if code is None:
            pytest.fail(f"{what} did not finish in {BLOCK_TIMEOUT_S} s:\n{result.stdout}\n{result.stderr}")
        return result

    def block(self, b: Block) -> None:
        text = self.ported(b.text)
        if b.lang == "toml":
            unknown = _keys(tomllib.loads(text)) - documented_keys()
            assert not unknown, f"{b}: keys docs/CONFIG.md does not document: {sorted(unknown)}"
        elif b.lang == "python":
            r = self.run([sys.executable, "-"], text, str(b))
            assert r.returncode == 0, f"{b} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        elif b.lang == "sh":
            # a password prompt (mqgate passwd) reads these two lines
            r = self.run(["bash", "-e", "-o", "pipefail", "-c", text], "s3cret-pw\ns3cret-pw\n", str(b))
            assert r.returncode == 0, f"{b} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
        elif b.lang == "console":
            for command, shown in _console(text):
                r = self.run(["bash", "-o", "pipefail", "-c", command], "", f"{b}: {command}")
                error = next((ln for ln in shown if re.match(r"mqgate[\w ]*: ", ln)), None)
                if error is None:
                    assert r.returncode == 0, f"{b}: `{command}` failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
                else:
                    stable = re.split(r"\d", error, maxsplit=1)[0]
                    assert r.returncode != 0 and r.stderr.startswith(stable), (
                        f"{b}: `{command}` should fail with `{error}`; it answered {r.returncode}:\n{r.stdout}\n{r.stderr}")


def _keys(doc: dict, top: bool = True) -> set[str]:
    keys = set()
    for k, v in doc.items():
        if isinstance(v, dict) and top:
            keys |= _keys(v, top=False)
        else:
            keys.add(k)
    return keys


def _console(text: str) -> list[tuple[str, list[str]]]:
    """``$ command`` lines (a trailing backslash continues one) and the output lines shown after each."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            cmd = lines[i][2:]
            while cmd.endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd[:-1] + "\n" + lines[i]
            out.append((cmd, []))
        elif out:
            out[-1][1].append(lines[i])
        i += 1
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_examples_run(doc, tmp_path):
    runnable = [b for b in blocks(doc) if b.lang in RUNNABLE and b.skip is None]
    if not runnable:
        return  # nothing to run (every block is output, or says why it cannot run here)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    ports = {"namesrv": free_port(), "broker": free_port(), "mqtt": free_port(), "ws": free_port(),
             "http": free_port(), "grpc": free_port(), "events": free_port()}
    with ServeProcess(tmp_path / "data", "--namesrv-port", str(ports["namesrv"]), "--broker-port", str(ports["broker"]),
                      "--mqtt-port", str(ports["mqtt"]), "--ws-port", str(ports["ws"]),
                      "--http-port", str(ports["http"]), "--grpc-port", str(ports["grpc"]),
                      "--events-port", str(ports["events"]), cwd=tmp_path,
                      env={"PYTHONPATH": str(ROOT)}):
        runner = Runner(tmp_path, ports)
        for b in runnable:
            runner.block(b)
