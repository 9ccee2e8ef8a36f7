"""Every command the README shows in a block marked as one runs, from a clean clone with the venv
made, as a newcomer runs it: each exits 0, or prints what the README says it prints. So do the
commands of the pages the README sends a newcomer to next (`WALKED`, in that order, after the
README's own): the README is a short tour, and the commands it once held live there now.

How the README marks its blocks (and how this test reads them):

- ```` ```sh ````: commands, one a line (a `\\` at the end continues it), each followed by a
  comment at most. Each must exit 0. One whose comment says `Ctrl-C` keeps running (a server, a
  stream): it must still be running when the block is done, and is then stopped with Ctrl-C.
- ```` ```console ````: a transcript: `$ command` lines, each followed by what it prints. The
  printed lines must come in that order (other lines may come between them); `…` in a line
  stands for any text, a line of `…` alone for any lines. A command still running once it has
  printed them keeps running until the block is done (a server the next commands talk to, a
  stream), then gets Ctrl-C.
- Every other block (`text`, `yaml`) is not run, and every block says which it is.

The commands run in the order of the README, then of each page of `WALKED`, each with bash in
the clone's folder, the venv's `bin` first on `PATH` (as after `. .venv/bin/activate`), no
`KEYSTORE_PASSWORD` in the environment, and a `NAME=$(...)` line setting `NAME` for the commands
after it. The quick start's `make run` is the dev broker and daemon the other blocks talk to: it
keeps running from block to block. A block that starts a daemon in its place (`make run
CONFIG=...`, `twistd -n ssekd --config etc/zilla.yaml ...`: "Ctrl-C the plain make run first")
has it stopped first and started again after.

Two things differ from a terminal, and only in numbers: the ports. 7114, 7143, 9092, 7180, 7115
and 7190 may be taken on a machine other developers share, so the clone's configs use free ports
and the commands and the output they must print have the same numbers replaced
(`tests/support/checkout.py`). And `make test` runs with `PYTEST_ARGS` naming one small test
file: the whole suite is the one running this test.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.checkout import ROOT, Ports, clean_clone, venv_is_current
from tests.support.launched import Launched, launch
from tests.support.wait import wait_until

pytestmark = [pytest.mark.daemon]

README = ROOT / "README.md"
#: The pages whose blocks run after the README's, in this order, against the same `make run`:
#: every block of each says what it is, as the README's do.
WALKED = tuple(ROOT / "docs" / f"{name}.md"
               for name in ("getting-started", "features", "security", "scaling", "deploying"))
#: Block languages that are run, and those that are not.
RUN = ("sh", "console")
NOT_RUN = ("text", "yaml", "json")
#: A command that serves the shipped config's ports, in place of the quick start's `make run`.
TAKES_ITS_PLACE = re.compile(r"^(make run\b.+|(\.venv/bin/)?twistd -n ssekd --config "
                             r"etc/zilla(-jwt)?\.yaml\b.*)$")
STACK = "make run"
#: What `make test` runs inside this test: its wiring, not the whole suite again.
MAKE_TEST_ARGS = "-q -p no:cacheprovider tests/test_makefile.py"


@dataclass
class Command:
    text: str  # as the README shows it, comment removed
    comment: str
    expected: list[str] = field(default_factory=list)  # console: what it prints
    console: bool = False

    @property
    def keeps_running(self) -> bool:
        return "Ctrl-C" in self.comment


@dataclass
class Block:
    line: int
    language: str
    commands: list[Command]
    file: str = "README.md"

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.language})"


def split_comment(line: str) -> tuple[str, str]:
    """`command  # comment` -> (command, comment); a `#` inside quotes is no comment."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def joined(lines: Iterator[str]) -> Iterator[str]:
    """Lines with `\\` continuations joined."""
    pending = ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def blocks(text: str, file: str = "README.md") -> list[Block]:
    """Every fenced block of a page (the README's by default) with its commands; raises on a
    block that does not say what it is."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, language, start = m.group(1), m.group(2), i + 1
        body: list[str] = []
        i += 1
        while not re.match(rf"^{indent}```\s*$", lines[i]):
            body.append(lines[i][len(indent):])
            i += 1
        i += 1
        assert language in RUN + NOT_RUN, \
            f"{file}:{start}: a block must say what it is: ```sh or ```console (run by " \
            f"tests/e2e/test_readme.py) or ```text, ```yaml (not run); got {language!r}"
        commands: list[Command] = []
        if language == "sh":
            for line in joined(iter(body)):
                command, comment = split_comment(line)
                if command.strip():
                    commands.append(Command(command.strip(), comment))
        elif language == "console":
            for line in joined(iter(body)):
                if line.startswith("$ "):
                    command, comment = split_comment(line[2:])
                    commands.append(Command(command.strip(), comment, console=True))
                elif line.strip():
                    assert commands, f"{file}:{start}: output before any `$ command`"
                    commands[-1].expected.append(line.rstrip())
        found.append(Block(start, language, commands, file))
    return found


def walked_blocks() -> list[Block]:
    """The README's blocks, then those of each page of `WALKED`, in the order they run."""
    found = blocks(README.read_text())
    for page in WALKED:
        found += blocks(page.read_text(), str(page.relative_to(ROOT)))
    return found


def printed(expected: list[str], output: str) -> list[str]:
    """The expected lines not found, in order, in `output` (empty: all were printed)."""
    actual = [line.rstrip() for line in output.splitlines()]
    at = 0
    for n, want in enumerate(expected):
        if want.strip() == "…":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("…")))
        while at < len(actual) and not pattern.fullmatch(actual[at]):
            at += 1
        if at == len(actual):
            return expected[n:]
        at += 1
    return []


class Session:
    """The clone, its environment, and what keeps running between commands and blocks."""

    def __init__(self, folder: Path, ports: Ports) -> None:
        self.folder = folder
        self.ports = ports
        bin_dir = folder / ".venv" / "bin"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("KEYSTORE_PASSWORD", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST")}
        self.env.update(PATH=f"{bin_dir}:{self.env.get('PATH', '/usr/bin:/bin')}",
                        VIRTUAL_ENV=str(folder / ".venv"), PYTEST_ARGS=MAKE_TEST_ARGS)
        self.stack: Launched | None = None
        self.quick_start: Command | None = None
        self.n = 0

    def launch(self, command: str) -> Launched:
        self.n += 1
        return launch(self.ports.mapped(command), self.folder, self.env,
                      log=self.folder / f".readme-{self.n}.log", terminal=True)

    def start_stack(self) -> None:
        assert self.quick_start is not None
        self.stack = self.launch(self.quick_start.text)
        missing = self.wait_printed(self.stack, self.quick_start.expected, 120)
        assert not missing, f"`make run` did not print {missing!r}:\n{self.stack.output()}"

    def stop_stack(self) -> None:
        """Ctrl-C, as in its terminal: make dies of the SIGINT, the launcher stops the rest."""
        if self.stack is not None:
            stack, self.stack = self.stack, None
            assert stack.interrupt() in (0, -2, 130), stack.output()[-3000:]
            assert "ENGINE_STOPPED" in stack.output(), stack.output()[-3000:]

    def wait_printed(self, run: Launched, expected: list[str], timeout: float) -> list[str]:
        wanted = [self.ports.mapped(line) for line in expected]
        deadline = time.monotonic() + timeout
        while printed(wanted, run.output()) and run.printing() and time.monotonic() < deadline:
            time.sleep(0.2)
        return printed(wanted, run.output())

    def assign(self, command: str) -> bool:
        """`NAME=$(...)`: run it, keep NAME for the commands after it."""
        m = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(\$\(.*\))", command)
        if not m:
            return False
        value = self.ports.mapped(m.group(2))
        result = subprocess.run(["bash", "-c", f'printf %s "{value}"'], cwd=self.folder,
                                env=self.env, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0 and result.stdout, result
        self.env[m.group(1)] = result.stdout
        return True


def run_block(session: Session, block: Block) -> None:
    commands = block.commands
    if any(TAKES_ITS_PLACE.match(c.text) for c in commands):
        session.stop_stack()
    elif session.stack is None and session.quick_start is not None:
        session.start_stack()
    running: list[tuple[Command, Launched]] = []
    try:
        for command in commands:
            if command.text == STACK and session.quick_start is None:
                session.quick_start = command
                session.start_stack()
                continue
            if session.assign(command.text):
                continue
            run = session.launch(command.text)
            where = f"{block}: `{command.text}`"
            if command.console:
                missing = session.wait_printed(run, command.expected, 60)
                assert not missing, f"{where} did not print {missing!r}:\n{run.output()[-4000:]}"
                if run.running():
                    running.append((command, run))
            elif command.keeps_running:
                time.sleep(3)
                assert run.running(), f"{where} stopped ({run.process.returncode}), where the " \
                                      f"README says it keeps running:\n{run.output()[-4000:]}"
                running.append((command, run))
            else:
                try:
                    status = run.wait(240)
                except subprocess.TimeoutExpired:
                    run.interrupt()
                    raise AssertionError(f"{where} did not finish:\n{run.output()[-4000:]}") \
                        from None
                assert status == 0, f"{where} exited {status}:\n{run.output()[-4000:]}"
        for command, run in running:
            assert run.running() or run.process.returncode == 0, \
                f"{block}: `{command.text}` ended {run.process.returncode} before the block " \
                f"was done:\n{run.output()[-4000:]}"
    finally:
        for _, run in reversed(running):
            run.interrupt()
    if any(TAKES_ITS_PLACE.match(c.text) for c in commands):
        session.start_stack()


def test_every_block_says_what_it_is_and_the_commands_are_there() -> None:
    """The test below can only run what it finds: the README and the pages walked after it have
    command blocks, the quick start's `make run` first among them, and no block whose kind it
    cannot tell; the README shows a resume with `Last-Event-ID`, and each walked page has a
    block that runs."""
    found = walked_blocks()
    run = [b for b in found if b.language in RUN]
    assert len(run) >= 10
    assert run[0].commands[0].text == STACK and run[0].commands[0].expected
    assert run[0].file == "README.md"
    assert any("Last-Event-ID" in c.text for b in run if b.file == "README.md"
               for c in b.commands)
    for page in WALKED:
        assert any(b.file == str(page.relative_to(ROOT)) for b in run), page
    # the quick start says what you will see: the three addresses and the one-line stop
    said = "\n".join(run[0].commands[0].expected)
    for words in ("http://localhost:7114/ ", "http://localhost:7114/events",
                  "https://localhost:7143/", "Ctrl-C stops"):
        assert words in said
    assert printed(["a…c", "…", "e"], "a b c\nd\ne\n") == []
    assert printed(["a…c", "z"], "a b c\nd\ne\n") == ["z"]


@pytest.mark.timeout(900)
def test_every_readme_command_runs_as_shown(tmp_path: Path) -> None:
    ports = Ports.free()
    folder = clean_clone(tmp_path / "ssekd", ports)
    assert venv_is_current(folder), "make setup first: make run in the clone must not install"
    session = Session(folder, ports)
    failures: list[str] = []
    try:
        for block in walked_blocks():
            if block.language not in RUN:
                continue
            try:
                run_block(session, block)
            except AssertionError as e:
                failures.append(str(e))
                if session.quick_start is not None and (session.stack is None or
                                                        not session.stack.running()):
                    session.stack = None
    finally:
        session.stop_stack()
    assert not failures, "\n\n".join(failures)
    ran = [b for b in walked_blocks() if b.language in RUN]
    print(f"\nREADME and the pages walked after it: {sum(len(b.commands) for b in ran)} "
          f"commands in {len(ran)} blocks, {session.n} run (besides NAME=$(...) lines)")
    wait_until(lambda: not left_in(folder), 15,
               what=lambda: f"processes left running in the clone: {left_in(folder)}")


def left_in(folder: Path) -> list[str]:
    """Command lines of the processes whose working folder is the clone (a broker, a producer,
    a daemon a command started and Ctrl-C did not stop)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(folder):
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes()
                             .replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return found
