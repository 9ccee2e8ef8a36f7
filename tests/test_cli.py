"""`ssekd run` hands its options to twistd: the config, file watching and the workers; and every
command's `--help` is whole: named as it is typed, every sentence finished, every option
described."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ssekd import cli
from tests.support.checkout import Ports, clean_clone


def test_run_passes_watch_and_workers_to_twistd(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append((path, list(argv))))
    cli.main(["run", "--config", "z.yaml", "--watch", "--workers", "auto"])
    cli.main(["run"])
    twistd = str(Path(sys.executable).with_name("twistd"))
    assert calls == [
        (twistd, [twistd, "-n", "ssekd", "--config", "z.yaml", "--watch", "--workers", "auto"]),
        (twistd, [twistd, "-n", "ssekd", "--config", "etc/zilla.yaml"]),
    ]


def test_version_is_the_installed_packages() -> None:
    """`ssekd --version` and `twistd ssekd --version` say the version `ssekd_build_info`
    exports, which is the installed package's."""
    import subprocess
    from importlib.metadata import version

    import ssekd
    assert ssekd.__version__ == version("ssekd")
    bin_dir = Path(sys.executable).parent
    for command in ([str(bin_dir / "ssekd"), "--version"],
                    [str(bin_dir / "twistd"), "ssekd", "--version"]):
        out = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout) == (0, f"ssekd {ssekd.__version__}\n"), out


# -- every command's help is whole ------------------------------------------------------------

BIN = Path(sys.executable).parent
#: Every command a user may ask for help, as they would type it.
COMMANDS = [
    [str(BIN / "ssekd")],
    *[[str(BIN / "ssekd"), c] for c in ("check", "asyncapi", "produce", "run")],
    [str(BIN / "twistd"), "ssekd"],
    [str(BIN / "ssekd-spark")],
    *[[str(BIN / "ssekd-spark"), c] for c in ("snapshot", "export")],
    *[[sys.executable, "-m", f"ssekd.{m}"] for m in ("dev", "dev.broker", "dev.certs",
                                                     "dev.token_service", "dev.demo_producer",
                                                     "todo_service")],
]


def help_problems(text: str, prog: str) -> list[str]:
    """What is cut off or missing in a help text: a usage line for `prog`, every paragraph of
    prose ending a sentence, every option and command with a description."""
    problems = []
    if not re.match(rf"(?i)usage: {re.escape(prog)}\b", text.lstrip()):
        problems.append(f"usage does not name {prog!r}: {text.splitlines()[0]!r}")
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    for p in paragraphs:
        lines = p.splitlines()
        if lines[0].lower().startswith("usage:"):
            continue
        if re.match(r"^[\w ]+:$", lines[0].strip()):  # "options:", "positional arguments:"
            entries: list[list[str]] = []
            for line in lines[1:]:
                indent = len(line) - len(line.lstrip())
                if line.strip().startswith("-") or (indent <= 4 and not entries) or \
                        (indent <= 4 and not line.startswith("    " * 2)):
                    entries.append([line.strip()])
                else:
                    entries[-1].append(line.strip())
            for entry in entries:
                head = re.split(r"\s{2,}", entry[0], maxsplit=1)
                described = len(head) > 1 or len(entry) > 1
                if not described and not head[0].startswith("{"):
                    problems.append(f"no description: {entry[0]!r}")
            continue
        if not re.search(r"[.:)]$", p):
            problems.append(f"ends mid-sentence: ...{p[-60:]!r}")
    return problems


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(Path(c[0]).name
                                                                      if i == 0 else w
                                                                      for i, w in enumerate(c)))
def test_every_command_s_help_is_whole(command: list[str]) -> None:
    result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    text = result.stdout
    if command[0] == sys.executable:
        prog = f"python -m {command[2]}"
    elif command[0].endswith("twistd"):
        prog = "twistd"
    else:
        prog = " ".join(Path(c).name if i == 0 else c for i, c in enumerate(command))
    assert help_problems(text, prog) == [], text


def test_the_help_check_finds_a_cut_sentence() -> None:
    """The check above can fail: `ssekd --help` as it was, its description cut where its
    docstring's first line ended, `run` described nowhere."""
    cut = ("usage: ssekd [-h] {check,run} ...\n\nThe `ssekd` command: `check` a config and "
           "print its graph, `run` the daemon in the foreground,\n\npositional arguments:\n"
           "  {check,run}\n    check   validate\n    run\n\noptions:\n  -h, --help  show\n")
    assert help_problems(cut, "ssekd") == [
        "ends mid-sentence: ...'fig and print its graph, `run` the daemon in the foreground,'",
        "no description: 'run'"]
    assert help_problems(cut, "ssekd produce")[0].startswith("usage does not name")


def test_the_shipped_configs_check_clean_with_no_secret_in_the_environment(
        tmp_path: Path) -> None:
    """`ssekd check --config etc/zilla.yaml`, as docs/getting-started.md shows it, on a clean clone: it
    stopped with "environment variable KEYSTORE_PASSWORD is not set", which only `make run`
    set. The store it names does not exist yet there: a warning, exit 0."""
    env = {k: v for k, v in os.environ.items() if k != "KEYSTORE_PASSWORD"}
    clone = clean_clone(tmp_path / "ssekd", Ports.free())
    for config in ("etc/zilla.yaml", "etc/zilla-jwt.yaml", "etc/zilla-relay.yaml",
                   "etc/zilla-todo.yaml"):
        result = subprocess.run([str(BIN / "ssekd"), "check", "--config", config], cwd=clone,
                                capture_output=True, text=True, env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "schema and references ok" in result.stdout
        assert "is not set" not in result.stderr
    result = subprocess.run(["make", "check"], cwd=clone, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_does_not_import_the_opentelemetry_sdk_for_a_config_without_otlp(
        tmp_path: Path) -> None:
    """Most of `ssekd check`'s time is importing; the OpenTelemetry SDK alone took a third of a
    second, for configs that have no otlp exporter (getting-started says what check spends)."""
    root = Path(__file__).resolve().parents[1]
    probe = ("import sys; from ssekd import cli; "
             "status = cli.main(['check', '--config', sys.argv[1]]); "
             "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('opentelemetry')}))")
    done = subprocess.run([sys.executable, "-c", probe, str(root / "etc" / "zilla.yaml")],
                          capture_output=True, text=True, cwd=root, check=False, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
