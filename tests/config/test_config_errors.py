"""Broken configs: each stops the daemon before it listens, naming file, line, path and what
was expected. The in-process test checks the exact issue; the subprocess test runs the real
`twistd ssekd` on every case and checks it exits 1 with no port opened."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from twisted.internet.testing import MemoryReactorClock

from ssekd.config import ConfigError
from ssekd.config.load import load_config
from ssekd.dev.broker import free_port, port_open
from ssekd.engine import Engine
from ssekd.spi.plugins import discover
from tests.support.daemon import TWISTD
from tests.support.data import ZILLA_EXAMPLE

GOOD = """\
name: test
bindings:
  tcp0:
    type: tcp
    kind: server
    options:
      host: 127.0.0.1
      port: {port}
    exit: http0
  http0:
    type: http
    kind: server
    routes:
      - when:
          - headers:
              :path: /{{path}}
        exit: files_map
  files_map:
    type: http-filesystem
    kind: proxy
    routes:
      - when:
          - path: /{{path}}
        exit: files
        with:
          path: ${{params.path}}
  files:
    type: filesystem
    kind: server
    options:
      location: www
"""

# (id, replace-this, with-this, line, path, words the message must contain)
CASES = [
    ("wrong-type-port", "port: {port}", "port: [true]", 8, "bindings.tcp0.options.port[0]",
     "expected a port"),
    ("unknown-binding-type", "type: http-filesystem", "type: http-files", 19,
     "bindings.files_map.type", "unknown binding type 'http-files'"),
    ("unknown-kind", "    kind: server\n    routes", "    kind: proxy\n    routes", 12,
     "bindings.http0.kind", "has no kind 'proxy'"),
    ("dangling-exit", "exit: http0", "exit: http9", 9, "bindings.tcp0.exit",
     "exit 'http9' of binding 'tcp0' is not a binding"),
    ("bad-port-range", "port: {port}", "port: \"9000-8000\"", 8, "bindings.tcp0.options.port",
     "within 1-65535"),
    ("port-out-of-range", "port: {port}", "port: 70000", 8, "bindings.tcp0.options.port",
     "expected a port"),
    ("cors-credentials-any-origin", "  http0:\n    type: http\n    kind: server\n",
     "  http0:\n    type: http\n    kind: server\n    options:\n      access-control:\n"
     "        policy: cross-origin\n        allow: {{credentials: true}}\n", 16,
     "bindings.http0.options.access-control.allow.credentials",
     "expected `allow.origins` beside `credentials: true`"),
    ("unset-env", "location: www", "location: ${{{{ env.SSEKD_TEST_UNSET }}}}", 31,
     "bindings.files.options.location",
     "environment variable SSEKD_TEST_UNSET is not set"),
    ("duplicate-key", "      host: 127.0.0.1\n", "      host: 127.0.0.1\n      host: ::1\n", 8,
     "bindings.tcp0.options.host", "duplicate key 'host'"),
    ("yaml-syntax", "    exit: http0\n", "    exit: [http0\n", 10, "", "YAML syntax"),
    ("unknown-option", "      location: www", "      location: www\n      symlink: follow", 32,
     "bindings.files.options.symlink", "unexpected property 'symlink'"),
    ("bad-enum", "      location: www", "      location: www\n      symlinks: always", 32,
     "bindings.files.options.symlinks", "expected one of 'follow', 'ignore'"),
    ("bad-name", "  tcp0:", "  0tcp:", 3, "bindings.0tcp", "a name matching"),
    ("exit-of-wrong-role", "exit: http0", "exit: files", 9, "bindings.tcp0.exit",
     "expected a binding that is stream"),
    ("missing-required", "    options:\n      location: www", "    options: {{}}", 30,
     "bindings.files.options", "location is required"),
    ("route-without-exit", "        exit: files_map\n", "", 14, "bindings.http0.routes[0]",
     "exit is required"),
    ("bad-cors-policy", "    kind: server\n    routes",
     "    kind: server\n    options:\n      access-control:\n        policy: open\n    routes",
     15, "bindings.http0.options.access-control.policy", "expected one of"),
    ("bad-header-pattern-type", "              :path: /{{path}}", "              :path: 5", 16,
     "bindings.http0.routes[0].when[0].headers.:path", "expected string, got int 5"),
    ("top-level-unknown", "name: test", "name: test\nbinding: {{}}", 2, "binding",
     "unexpected property 'binding'"),
    ("vault-on-tcp", "    exit: http0", "    exit: http0\n    vault: nope", 10,
     "bindings.tcp0.vault", "unexpected property 'vault'"),
    ("undefined-guard", "        exit: files_map",
     "        exit: files_map\n        guarded:\n          jwt0: [read]", 19,
     "bindings.http0.routes[0].guarded.jwt0", "guard 'jwt0' used by binding 'http0'"),
    # the first fifteen minutes (issue 24): what passed or misled
    ("tcp-route-on-a-port-not-listened", "    exit: http0\n",
     "    routes:\n      - when: [{{port: 7115}}]\n        exit: http0\n", 10,
     "bindings.tcp0.routes[0].when[0].port",
     "expected a port this server listens on ({port}); it does not listen on 7115"),
    ("bad-element-of-a-port-list", "port: {port}", "port: [{port}, 71144]", 8,
     "bindings.tcp0.options.port[1]",
     'expected a port 1-65535 or a range such as "8080-8090", got int 71144'),
    ("misspelt-exit", "exit: http0", "exit: htp0", 9, "bindings.tcp0.exit",
     "exit 'htp0' of binding 'tcp0' is not a binding; did you mean 'http0'?"),
    ("yaml-indentation", "    kind: server\n    options:", "    kind: server\n   options:", 6,
     "", "YAML syntax: this line is indented differently from the lines of the block it is "
         "in (the block from line 3)"),
    ("route-exit-wrong-role", "    routes:\n      - when:\n          - path: /{{path}}\n"
     "        exit: files\n", "    exit: files_map\n    routes:\n      - when:\n"
     "          - path: /{{path}}\n        exit: files\n", 21, "bindings.files_map.exit",
     "expected a binding that is file serving"),
]


def broken(tmp_path: Path, case: tuple[str, str, str, int, str, str], port: int) -> Path:
    _, old, new, *_ = case
    text = GOOD.replace(old, new, 1)
    assert text != GOOD, f"case {case[0]} did not change the config"
    config = tmp_path / "zilla.yaml"
    config.write_text(text.format(port=port))
    (tmp_path / "www").mkdir(exist_ok=True)
    return config


def test_the_base_config_is_good(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(GOOD.format(port=free_port()))
    load_config(config, discover())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_issue_names_file_line_path_and_expectation(tmp_path: Path, case: tuple) -> None:
    config = broken(tmp_path, case, 7114)
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})  # load, validate and build
    _, _, _, line, path, words = case
    issue = caught.value.issues[0]
    assert issue.file == config
    assert issue.line == line, str(caught.value)
    assert issue.path == path, str(caught.value)
    assert words.replace("{port}", "7114") in issue.message, str(caught.value)
    assert f"{config}:{line}: " in str(caught.value)


@pytest.mark.daemon
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_daemon_refuses_to_start(tmp_path: Path, case: tuple) -> None:
    port = free_port()
    config = broken(tmp_path, case, port)
    result = subprocess.run([TWISTD, "-n", "--pidfile=", "ssekd", "--config", str(config)],
                            capture_output=True, timeout=30, cwd=tmp_path,
                            env={"PATH": "/usr/bin:/bin"})
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 1, output
    assert f"{config}:{case[3]}: " in output
    assert case[5].replace("{port}", str(port)) in output
    assert "Traceback" not in output
    assert not port_open("127.0.0.1", port)


def test_a_secret_is_not_repeated_in_an_error(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text("name: t\nvaults:\n  v:\n    type: filesystem\n    options:\n"
                      "      keys: {store: s.p12, password: 918273645}\n"
                      "bindings:\n  http0: {type: http, kind: server, exit: http0}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config, discover())
    text = str(caught.value)
    assert "918273645" not in text
    assert f"{config}:6: vaults.v.options.keys.password: expected string, got an integer " \
           "(not shown: a secret)" in text, text


def test_all_issues_are_reported_at_once(tmp_path: Path) -> None:
    text = GOOD.replace("exit: http0", "exit: http9").replace("location: www", "location: 5")
    config = tmp_path / "zilla.yaml"
    config.write_text(text.format(port=7114))
    with pytest.raises(ConfigError) as caught:
        load_config(config, discover())
    assert [i.path for i in caught.value.issues] == ["bindings.files.options.location"], \
        "schema problems are reported before references are resolved"


def test_seed_example_is_accepted(tmp_path: Path) -> None:
    config = load_config(ZILLA_EXAMPLE, discover(), environ={"KEYSTORE_PASSWORD": "x"})
    assert config.namespace == "example"
    assert set(config.bindings) >= {"north_tcp_server", "north_tls_server", "south_kafka_client"}


def test_env_substitution_allows_spaces(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text(GOOD.replace("location: www", "location: ${{{{  env.WWW  }}}}")
                      .format(port=7114))
    loaded = load_config(config, discover(), environ={"WWW": "public"})
    assert loaded.bindings["files"].options["location"] == "public"


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "missing.yaml", discover())
    assert "cannot read config" in str(caught.value)


def test_describes_in_plain_words() -> None:
    text = textwrap.dedent("""\
        name: test
        bindings:
          a: {type: tcp, kind: server, options: {port: "x"}, exit: a}
    """)
    from ssekd.config.document import parse_text
    from ssekd.config.schema import validate
    from ssekd.spi.plugins import discover

    doc = parse_text(text, Path("inline.yaml"), {})
    issues = validate(doc, discover())
    assert any("expected a port" in i.message and i.line == 3 for i in issues), issues


def test_check_command_accepts_the_seed_and_names_the_missing_store() -> None:
    seed = ZILLA_EXAMPLE
    ssekd = str(Path(TWISTD).with_name("ssekd"))
    result = subprocess.run([ssekd, "check", "--config", str(seed)], capture_output=True,
                            text=True, timeout=60, env={"KEYSTORE_PASSWORD": "x",
                                                        "PATH": "/usr/bin:/bin"})
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert "schema and references ok" in out
    assert "north_tcp_server (tcp server" in out and "-> south_tcp_client (tcp client)" in out
    assert "tls/localhost.p12 does not exist" in out and "warning:" in out
    assert "Traceback" not in out
    strict = subprocess.run([ssekd, "check", "--strict", "--config", str(seed)],
                            capture_output=True, text=True, timeout=60,
                            env={"KEYSTORE_PASSWORD": "x", "PATH": "/usr/bin:/bin"})
    assert strict.returncode == 1


def test_check_command_fails_on_a_broken_config(tmp_path: Path) -> None:
    config = broken(tmp_path, CASES[3], 7114)  # dangling exit
    ssekd = str(Path(TWISTD).with_name("ssekd"))
    result = subprocess.run([ssekd, "check", "--config", str(config)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert f"{config}:9: bindings.tcp0.exit: exit 'http9'" in result.stderr


def test_keepalive_must_be_shorter_than_the_http_idle_timeout(tmp_path: Path) -> None:
    config = tmp_path / "zilla.yaml"
    config.write_text("""\
name: t
bindings:
  tcp0: {type: tcp, kind: server, options: {port: 7114}, exit: http0}
  http0:
    type: http
    kind: server
    options: {limits: {idle-timeout: 20}}
    exit: sse0
  sse0:
    type: sse
    kind: server
    options:
      max-idle-time: 30
    exit: map0
  map0:
    type: sse-kafka
    kind: proxy
    routes: [{when: [{path: "/{t}"}], exit: cc, with: {topic: "${params.t}"}}]
  cc: {type: kafka, kind: cache_client, exit: cs}
  cs: {type: kafka, kind: cache_server, exit: kc}
  kc: {type: kafka, kind: client, options: {servers: ["localhost:9092"]}}
""")
    with pytest.raises(ConfigError) as caught:
        Engine(config, reactor=MemoryReactorClock(), environ={})
    (issue,) = caught.value.issues
    assert (issue.line, issue.path) == (13, "bindings.sse0.options.max-idle-time")
    assert "less than the idle-timeout of http binding 'http0' (20 s)" in issue.message


def test_an_unknown_exit_far_from_every_name_lists_them() -> None:
    """No near name to suggest: the names there are."""
    config = GOOD.replace("exit: http0", "exit: kafka").format(port=7114)
    with pytest.raises(ConfigError) as caught:
        load_config_text(config)
    assert "expected one of files, files_map, http0, tcp0" in str(caught.value)


def load_config_text(text: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "zilla.yaml"
        path.write_text(text)
        load_config(path, discover())


@pytest.mark.parametrize(("text", "line", "words"), [
    ("a: b: c\n", 1, "a `key:` where no key can start"),
    ("a: [x\nb: 1\n", 2, "the [ list ] opened at line 1 is not closed"),
    ("a:\n\tb: 1\n", 2, "a tab: YAML indents with spaces only"),
    ("a: 1\nb\nc: 2\n", 2, "this line is neither `key: value` nor `- item`"),
    ("a: \"abc\nb: 1\n", 3, "the quote opened at line 1 is never closed"),
    ("a: *x\n", 1, "`*x` refers to an anchor `&x` that is not defined"),
    ("a: @x\n", 1, "a value cannot start with '@' unless it is quoted"),
])
def test_a_yaml_syntax_error_is_said_in_words(text: str, line: int, words: str) -> None:
    """Not PyYAML's "expected <block end>, but found '<block mapping start>'"."""
    from ssekd.config.document import parse_text

    with pytest.raises(ConfigError) as caught:
        parse_text(text, Path("zilla.yaml"), {})
    [issue] = caught.value.issues
    assert issue.line == line, str(issue)
    assert issue.message.startswith("YAML syntax: ") and words in issue.message, str(issue)
    assert "<block" not in issue.message and "expected ','" not in issue.message
