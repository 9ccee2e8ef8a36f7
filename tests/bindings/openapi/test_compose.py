"""Composing from OpenAPI specs: the openapi server and client and the openapi-asyncapi proxy
become the bindings a zilla.yaml written by hand would have, and a spec that cannot be served
is a config error at the spec's file and line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ssekd.cli import main
from ssekd.config.compose import compose
from ssekd.config.document import read_document
from ssekd.spi.plugins import discover
from tests.support.composing import Rebuilds, edited_copy, load, problems, without_origin
from tests.support.data import DATA

KAFKA_PROXY = DATA / "zilla-examples" / "openapi.asyncapi.kakfa.proxy" / "etc"
PROXY = DATA / "zilla-examples" / "openapi.proxy" / "etc"

#: What Zilla's openapi.asyncapi.kakfa.proxy example stands for, as ssekd composes it, by hand.
BY_HAND = """\
name: zilla-openapi-proxy
catalogs:
  host_filesystem:
    type: filesystem
    options:
      subjects:
        http: {path: specs/http-openapi.yaml}
        kafka: {path: specs/kafka-asyncapi.yaml}
  north_openapi_server.requests:
    type: inline
    options:
      subjects:
        createPet-application/json-value:
          schema: '{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "required": ["id", "name"], "properties": {"id": {"type": "integer", "format":
            "int64"}, "name": {"type": "string"}, "tag": {"type": "string"}}}'
  south_asyncapi_client.payloads:
    type: inline
    options:
      subjects:
        petstore-pets-value:
          schema: '{"$schema": "http://json-schema.org/draft-07/schema#", "anyOf": [{"type":
            "object", "required": ["id", "name"], "properties": {"id": {"type": "integer",
            "format": "int64"}, "name": {"type": "string"}, "tag": {"type": "string"}}},
            {"type": "null"}]}'
bindings:
  north_openapi_server:
    type: tcp
    kind: server
    options: {host: 127.0.0.1, port: [7114]}
    exit: north_openapi_server.http_server
  north_openapi_server.http_server:
    type: http
    kind: server
    options:
      access-control: {policy: cross-origin}
      requests:
        - path: /pets
          method: POST
          content-type: [application/json]
          content:
            model: json
            catalog:
              north_openapi_server.requests: [{subject: createPet-application/json-value}]
    routes:
      - when: [{headers: {":path": /pets, ":method": GET}}]
        exit: north_openapi_asyncapi_proxy
      - when: [{headers: {":path": /pets, ":method": POST}}]
        exit: north_openapi_asyncapi_proxy
  north_openapi_asyncapi_proxy:
    type: http-kafka
    kind: proxy
    routes:
      - when: [{method: GET, path: /pets}]
        exit: south_asyncapi_client
        with:
          capability: fetch
          topic: petstore-pets
          merge: {content-type: application/json, patch: {initial: "[]", path: /-}}
      - when: [{method: POST, path: /pets}]
        exit: south_asyncapi_client
        with:
          capability: produce
          topic: petstore-pets
          acks: in_sync_replicas
          key: ${idempotencyKey}
  south_asyncapi_client:
    type: kafka
    kind: cache_client
    exit: south_asyncapi_client.cache_server
  south_asyncapi_client.cache_server:
    type: kafka
    kind: cache_server
    options:
      bootstrap: [petstore-pets]
      topics:
        - name: petstore-pets
          value:
            model: json
            catalog:
              south_asyncapi_client.payloads: [{subject: petstore-pets-value}]
    exit: south_asyncapi_client.kafka_client
  south_asyncapi_client.kafka_client:
    type: kafka
    kind: client
    options: {servers: ["kafka.examples.dev:29092"]}
telemetry:
  exporters:
    stdout_logs_exporter:
      type: stdout
"""


def example(folder: Path, **edits: list[tuple[str, str]]) -> Path:
    """The example's etc/ in `folder`, each file (`zilla`, `http`, `kafka`) with its text edits
    (each must apply once)."""
    return edited_copy(KAFKA_PROXY, folder / "ex",
                       {"zilla": "zilla.yaml", "http": "specs/http-openapi.yaml",
                        "kafka": "specs/kafka-asyncapi.yaml"}, edits)


def test_the_example_composes_what_a_hand_written_config_says(tmp_path: Path) -> None:
    composed = load(example(tmp_path))
    (tmp_path / "ex" / "by-hand.yaml").write_text(BY_HAND)
    by_hand = load(tmp_path / "ex" / "by-hand.yaml")
    assert list(composed.bindings) == list(by_hand.bindings)
    assert without_origin(composed) == without_origin(by_hand)
    assert composed.catalogs == by_hand.catalogs
    folder = tmp_path / "ex"
    assert set(composed.sources) >= {folder / "zilla.yaml", folder / "specs" / "http-openapi.yaml",
                                     folder / "specs" / "kafka-asyncapi.yaml"}


CREATE_PET = "      operationId: createPet\n"
SERVER_SPEC = ("              subject: http\n    exit: north_openapi_asyncapi_proxy\n")

BAD = [
    ("not-openapi-3", {"http": [("openapi: 3.0.0", "swagger: '2.0'")]},
     "specs/http-openapi.yaml:2: openapi: expected an OpenAPI 3 document (openapi: 3.x.y), got "
     "None (spec 'my-openapi-spec')"),
    ("a-ref-to-nothing", {"http": [('"$ref": "#/components/schemas/Pet"\n        required',
                                    '"$ref": "#/components/schemas/Cat"\n        required')]},
     "specs/http-openapi.yaml:39: paths./pets.post.requestBody.content.application/json.schema"
     ".$ref: reference '#/components/schemas/Cat' points at nothing in the spec "
     "(spec 'my-openapi-spec')"),
    ("two-operations-one-id", {"http": [(CREATE_PET, "      operationId: listPets\n")]},
     "specs/http-openapi.yaml:32: paths./pets.post.operationId: operationId 'listPets' is also "
     "GET /pets (specs/http-openapi.yaml:12); expected each operation to have its own "
     "(spec 'my-openapi-spec')"),
    ("security-that-maps-to-no-guard",
     {"http": [(CREATE_PET, CREATE_PET + "      security: [{petstore_auth: [write:pets]}]\n")]},
     ["specs/http-openapi.yaml:33: paths./pets.post.security: operation 'createPet' requires "
      "security scheme 'petstore_auth', which binding 'north_openapi_server' maps to no guard: "
      "add petstore_auth: <guard> to its options.specs.my-openapi-spec.security "
      "(spec 'my-openapi-spec')",
      "specs/http-openapi.yaml:33: paths./pets.post.security: operation 'createPet' requires "
      "security scheme 'petstore_auth', which binding 'north_openapi_asyncapi_proxy' maps to "
      "no guard: add petstore_auth: <guard> to its options.specs.openapi.my-openapi-spec"
      ".security (spec 'my-openapi-spec')"]),
    ("a-path-parameter-that-is-no-name",
     {"http": [('  "/pets":\n', '  "/pets/{pet-id}":\n')]},
     "specs/http-openapi.yaml:11: paths./pets/{pet-id}: parameter {pet-id} of '/pets/{pet-id}': "
     "a path part is captured by a name of letters, digits and _ (spec 'my-openapi-spec')"),
    ("a-route-naming-no-spec",
     {"zilla": [("          - spec: my-openapi-spec\n", "          - spec: other-spec\n")]},
     "zilla.yaml:43: bindings.north_openapi_asyncapi_proxy.routes[0].when[0].spec: 'other-spec' "
     "is not an openapi spec of binding 'north_openapi_asyncapi_proxy'; expected one of "
     "my-openapi-spec"),
    ("with-an-operation-the-kafka-spec-lacks",
     {"zilla": [("          spec: my-asyncapi-spec\n",
                 "          spec: my-asyncapi-spec\n          operation: listCats\n")]},
     "zilla.yaml:46: bindings.north_openapi_asyncapi_proxy.routes[0].with.operation: 'listCats' "
     "is not an operation of spec 'my-asyncapi-spec' (specs/kafka-asyncapi.yaml); expected one "
     "of: listPets, createPet, listPetById, updatePet, deletePet"),
    ("no-operation-paired",
     {"http": [("operationId: listPets", "operationId: listAll"),
               (CREATE_PET, "      operationId: addPet\n")]},
     "zilla.yaml:41: bindings.north_openapi_asyncapi_proxy.routes[0]: route 0 of binding "
     "'north_openapi_asyncapi_proxy' pairs no HTTP operation with a Kafka operation of spec "
     "'my-asyncapi-spec' (specs/kafka-asyncapi.yaml): an operation is paired with the one of "
     "its own operationId, or with with.operation"),
    ("an-extension-naming-no-parameter",
     {"http": [(CREATE_PET, CREATE_PET + "      x-zilla-http-kafka: {key: '{petId}'}\n")]},
     "specs/http-openapi.yaml:33: paths./pets.post.x-zilla-http-kafka: {petId} in "
     "x-zilla-http-kafka of operation 'createPet' is neither {identity} nor a parameter of its "
     "path '/pets' (spec 'my-openapi-spec')"),
    ("a-server-url-that-is-not-http",
     {"zilla": [("            - http://localhost:7114\n", "            - ws://localhost:7114\n")]},
     "zilla.yaml:20: bindings.north_openapi_server.options.specs.my-openapi-spec.servers[0]: "
     "expected a URL such as http://localhost:7114, got 'ws://localhost:7114'"),
]


@pytest.mark.parametrize("edits,expected", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_specs_and_options_are_errors_where_they_are(
        tmp_path: Path, edits: dict[str, list[tuple[str, str]]], expected: str | list[str],
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = example(tmp_path, **edits)
    monkeypatch.chdir(config.parent)  # file names as a user in that folder sees them
    said = [expected] if isinstance(expected, str) else expected
    assert problems(Path("zilla.yaml")) == said
    assert main(["check", "--config", "zilla.yaml"]) == 1
    assert capsys.readouterr().err.splitlines() == said


GUARD = ("bindings:\n", "guards:\n  jwt0:\n    type: jwt\n    options:\n      keys: "
                        "[{kty: oct, kid: k, alg: HS256, k: c2VjcmV0}]\nbindings:\n")
SECURED = [(CREATE_PET, CREATE_PET + "      security: [{petstore_auth: [write:pets]}]\n"
                        "      x-zilla-http-kafka:\n        overrides: {owner: '{identity}'}\n"),
           ("components:\n", "components:\n  securitySchemes:\n    petstore_auth:\n"
                              "      type: http\n      scheme: bearer\n")]
MAPPED = [GUARD, ("              subject: http\n    exit",
                  "              subject: http\n          security: {petstore_auth: jwt0}\n"
                  "    exit"),
          ("                subject: http\n        asyncapi",
           "                subject: http\n            security: {petstore_auth: jwt0}\n"
           "        asyncapi")]


def test_security_requires_the_mapped_guard_with_the_scopes_as_roles(tmp_path: Path) -> None:
    """An operation's security scheme mapped to a guard: the http server reads the bearer
    token for it and its route requires the requirement's scopes; the http-kafka route too,
    where `{identity}` of the extension is the guard's identity."""
    config = load(example(tmp_path, http=SECURED, zilla=MAPPED))
    http = config.bindings["north_openapi_server.http_server"]
    assert http.options["authorization"] == {
        "jwt0": {"credentials": {"headers": {"authorization": "Bearer {credentials}"}}}}
    assert [r.guarded for r in http.routes] == [{}, {"jwt0": ("write:pets",)}]
    routes = config.bindings["north_openapi_asyncapi_proxy"].routes
    assert [r.guarded for r in routes] == [{}, {"jwt0": ("write:pets",)}]
    assert routes[1].with_["overrides"] == {"owner": "${guarded['jwt0'].identity}"}


def test_security_that_cannot_be_one_guard_is_an_error(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    either = [(CREATE_PET, CREATE_PET + "      security: [{petstore_auth: []}, {key: []}]\n")]
    config = example(tmp_path, http=either, zilla=MAPPED)
    monkeypatch.chdir(config.parent)
    assert problems(Path("zilla.yaml"))[0] == (
        "specs/http-openapi.yaml:33: paths./pets.post.security: operation 'createPet' has 2 "
        "alternative security requirements; a route checks one guard: keep one "
        "(spec 'my-openapi-spec')")
    no_identity = [(CREATE_PET, CREATE_PET + "      x-zilla-http-kafka: {key: '{identity}'}\n")]
    config = example(tmp_path / "b", http=no_identity)
    monkeypatch.chdir(config.parent)
    assert problems(Path("zilla.yaml")) == [
        "specs/http-openapi.yaml:33: paths./pets.post.x-zilla-http-kafka: {identity} in "
        "x-zilla-http-kafka of operation 'createPet': the operation requires no security that "
        "maps to a guard, so there is no identity (spec 'my-openapi-spec')"]


def test_parameters_and_extension_reach_the_checks_and_the_routes(
        tmp_path: Path) -> None:
    """A path with a parameter: the http route captures it, the request check models it from
    its schema (an int64 here), the Kafka side is keyed (produce) and filtered (fetch) by it
    as Zilla's rule says, and the extension's filters and overrides are added."""
    one_pet = ('  "/pets/{id}":\n'
               "    parameters: [{name: id, in: path, required: true, schema: {type: integer}}]\n"
               "    get:\n      operationId: listPetById\n"
               "      x-zilla-http-kafka:\n"
               "        filters: [{headers: {owner: '{id}'}}]\n"
               "      responses:\n        '200':\n          description: one\n"
               "          content:\n            application/json:\n"
               "              schema: {$ref: '#/components/schemas/Pet'}\n"
               "    put:\n      operationId: updatePet\n"
               "      parameters: [{name: dryRun, in: query, schema: {type: boolean}}]\n"
               "      x-zilla-http-kafka:\n        overrides: {source: rest}\n"
               "      requestBody:\n        content:\n          application/json:\n"
               "            schema: {$ref: '#/components/schemas/Pet'}\n"
               "      responses:\n        '204':\n          description: done\n")
    config = load(example(tmp_path, http=[("components:\n", one_pet + "components:\n")]))
    http = config.bindings["north_openapi_server.http_server"]
    assert [r.when[0]["headers"] for r in http.routes][2:] == [
        {":path": "/pets/{id}", ":method": "GET"}, {":path": "/pets/{id}", ":method": "PUT"}]
    checks = http.options["requests"]
    assert [(c["path"], c["method"]) for c in checks] == [
        ("/pets", "POST"), ("/pets/{id}", "GET"), ("/pets/{id}", "PUT")]
    assert checks[1]["params"] == {"path": {"id": "int64"}}
    assert checks[2]["params"]["query"]["dryRun"]["model"] == "json"
    routes = config.bindings["north_openapi_asyncapi_proxy"].routes
    by_when = {(r.when[0]["method"], r.when[0]["path"]): r.with_ for r in routes}
    assert by_when[("GET", "/pets/{id}")] == {
        "capability": "fetch", "topic": "petstore-pets",
        "filters": [{"key": "${params.id}"}, {"headers": {"owner": "${params.id}"}}]}
    assert by_when[("PUT", "/pets/{id}")] == {
        "capability": "produce", "topic": "petstore-pets", "acks": "in_sync_replicas",
        "key": "${params.id}", "overrides": {"source": "rest"}}


def test_check_prints_what_was_composed_and_the_composed_config_loads_as_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    config = example(tmp_path)
    monkeypatch.chdir(config.parent)
    assert main(["check", "--config", "zilla.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:4] == [
        "zilla.yaml: schema and references ok (namespace zilla-openapi-proxy, 6 bindings)",
        "composed openapi server north_openapi_server: 2 operation(s) of my-openapi-spec "
        "(specs/http-openapi.yaml) on http 7114, 1 request check(s)",
        "composed openapi-asyncapi proxy north_openapi_asyncapi_proxy: 2 HTTP operation(s) "
        "paired with Kafka operations, from my-openapi-spec (specs/http-openapi.yaml), "
        "my-asyncapi-spec (specs/kafka-asyncapi.yaml)",
        "composed asyncapi client south_asyncapi_client: 1 topic(s) on "
        "kafka.examples.dev:29092, from my-asyncapi-spec (specs/kafka-asyncapi.yaml)"]
    assert out[4:6] == [
        "north_openapi_server (tcp server 127.0.0.1:[7114]) -> north_openapi_server.http_server "
        "(http server)",
        "  when :path=/pets :method=GET -> north_openapi_asyncapi_proxy (http-kafka proxy)"]
    assert main(["check", "--config", "zilla.yaml", "--print-composed"]) == 0
    printed = capsys.readouterr().out
    Path("composed.yaml").write_text(printed)
    written = load(Path("composed.yaml"))
    assert written.composites == {}, "nothing left to compose"
    assert without_origin(written) == without_origin(load(Path("zilla.yaml")))


def test_a_reload_rebuilds_only_what_a_spec_change_touches(tmp_path: Path) -> None:
    """Words alone keep every binding; a changed request schema rebuilds the http server (and
    the listener in front of it) and keeps the Kafka side; a new HTTP operation paired with
    Kafka rebuilds the http-kafka proxy too."""
    config = example(tmp_path)
    rebuilds = Rebuilds(config)
    spec = config.parent / "specs" / "http-openapi.yaml"
    worded = rebuilds.after(spec, "List all pets", "Every pet there is")
    assert worded.reused == set(rebuilds.first.runtimes)
    stricter = rebuilds.after(spec, "        - name\n", "        - name\n        - tag\n", 1)
    kafka_side = {"south_asyncapi_client", "south_asyncapi_client.cache_server",
                  "south_asyncapi_client.kafka_client"}
    assert stricter.reused == kafka_side | {"north_openapi_asyncapi_proxy"}
    deleting = rebuilds.after(
        spec, "components:\n", '  "/pets/{id}":\n    delete:\n      operationId: deletePet\n'
                               "      responses: {'204': {description: gone}}\ncomponents:\n")
    assert deleting.reused == kafka_side


def test_the_proxy_example_composes_a_server_and_a_client_to_the_named_upstream(
        tmp_path: Path) -> None:
    """openapi.proxy (its catalog entries naming `version: latest`): the server's routes go to
    the client; the client is an http client (checking the answers the spec describes) over a
    tcp client to the URL its options name, which the spec does not list (Zilla takes it as
    given)."""
    folder = tmp_path / "ex"
    shutil.copytree(PROXY, folder)
    config = folder / "zilla.yaml"
    text = config.read_text()
    assert text.count("              subject: petstore\n") == 2
    config.write_text(text.replace("              subject: petstore\n",
                                   "              subject: petstore\n              version: latest\n"))
    document = read_document(folder / "zilla.yaml")
    composed = compose(folder / "zilla.yaml", document, discover())
    bindings = composed.bindings
    assert list(bindings) == ["north_openapi_server", "north_openapi_server.http_server",
                              "south_openapi_client", "south_openapi_client.tcp_client"]
    http = bindings["north_openapi_server.http_server"]
    assert [(r.when[0]["headers"][":method"], r.exit) for r in http.routes] == [
        ("GET", "south_openapi_client"), ("POST", "south_openapi_client")]
    client = bindings["south_openapi_client"]
    assert (client.type, client.kind, client.exit) == \
        ("http", "client", "south_openapi_client.tcp_client")
    [check] = client.options["requests"]
    assert (check["path"], check["method"], check["responses"][0]["status"]) == \
        ("/pets", "GET", 200)
    assert bindings["south_openapi_client.tcp_client"].options == {"host": "openapi-mock",
                                                                  "port": 5000}
    assert composed.composites["south_openapi_client"] == (
        "openapi client south_openapi_client: 2 operation(s) of my-openapi-spec "
        f"({folder / 'specs' / 'petstore-openapi.yaml'}) to http://openapi-mock:5000, "
        "1 response check(s)")


def test_a_client_calls_one_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ex"
    shutil.copytree(PROXY, folder)
    config = folder / "zilla.yaml"
    config.write_text(config.read_text().replace(
        "            - http://openapi-mock:5000\n",
        "            - http://openapi-mock:5000\n            - https://openapi-mock:5443\n"))
    monkeypatch.chdir(folder)
    assert problems(Path("zilla.yaml")) == [
        "zilla.yaml:27: bindings.south_openapi_client.options.specs: binding "
        "'south_openapi_client' calls 2 upstreams (http://openapi-mock:5000, "
        "https://openapi-mock:5443); one client calls one: give each its own openapi client"]


def test_routes_take_operations_by_id_glob_and_tag(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's routes pick each operation's exit (operationId or glob, tag: all must
    match; the first route wins; else the binding's exit). The proxy's `with.operation` pairs
    every operation its route takes with one Kafka operation; `with.tag` pairs by operationId
    among the Kafka operations with that tag; a catalog's `version` is read."""
    tagged = [("  listPets:\n    action: receive\n",
               "  listPets:\n    action: receive\n    tags: [{name: reads}]\n")]
    audit = ("    exit: north_openapi_asyncapi_proxy\n",
             "    exit: north_openapi_asyncapi_proxy\n    routes:\n"
             "      - when: [{spec: my-openapi-spec, operation: 'create*', tag: pets}]\n"
             "        exit: audit_proxy\n"
             "  audit_proxy:\n    type: http-kafka\n    kind: proxy\n    routes:\n"
             "      - when: [{method: POST, path: /pets}]\n        exit: south_asyncapi_client\n"
             "        with: {capability: produce, topic: audit}\n")
    config = example(tmp_path / "a", kafka=tagged, zilla=[
        audit, ("              subject: http\n    exit",
                "              subject: http\n              version: latest\n    exit"),
        ("                subject: http\n        asyncapi",
         "                subject: http\n                version: latest\n        asyncapi"),
        ("                subject: kafka\n    routes",
         "                subject: kafka\n                version: latest\n    routes"),
        ("          - spec: my-openapi-spec\n        with:\n          spec: my-asyncapi-spec\n",
         "          - spec: my-openapi-spec\n            operation: list*\n            tag: pets\n"
         "        with:\n          spec: my-asyncapi-spec\n          tag: reads\n")])
    composed = load(config)
    http = composed.bindings["north_openapi_server.http_server"]
    assert [(r.when[0]["headers"][":method"], r.exit) for r in http.routes] == [
        ("GET", "north_openapi_asyncapi_proxy"), ("POST", "audit_proxy")]
    [fetch] = composed.bindings["north_openapi_asyncapi_proxy"].routes
    assert (fetch.when[0]["method"], fetch.with_["capability"]) == ("GET", "fetch")
    # one Kafka operation for every operation of the route
    one = example(tmp_path / "b", zilla=[
        ("          spec: my-asyncapi-spec\n",
         "          spec: my-asyncapi-spec\n          operation: createPet\n")])
    routes = load(one).bindings["north_openapi_asyncapi_proxy"].routes
    assert [(r.when[0]["method"], r.with_["capability"]) for r in routes] == [
        ("GET", "produce"), ("POST", "produce")]


def test_an_inline_spec_is_read_and_its_errors_are_at_the_configs_lines(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spec inline in zilla.yaml (an `inline` catalog) composes as from a file; a problem in
    it is at its line of zilla.yaml."""
    spec = (KAFKA_PROXY / "specs" / "http-openapi.yaml").read_text()
    inline = "".join(f"            {line}\n" for line in spec.splitlines())
    config = example(tmp_path, zilla=[
        ("catalogs:\n", "catalogs:\n  specs_inline:\n    type: inline\n    options:\n"
                        "      subjects:\n        http:\n          schema: |\n" + inline),
        ("            host_filesystem:\n              subject: http\n",
         "            specs_inline:\n              subject: http\n")])
    monkeypatch.chdir(config.parent)
    composed = load(Path("zilla.yaml"))
    assert len(composed.bindings["north_openapi_server.http_server"].routes) == 2
    text = config.read_text()
    config.write_text(text.replace('schemas/Pet"\n', 'schemas/Cat"\n', 1))  # the request body's
    line = next(i for i, t in enumerate(config.read_text().splitlines(), 1) if "Cat" in t)
    assert problems(Path("zilla.yaml")) == [
        f"zilla.yaml:{line}: paths./pets.post.requestBody.content.application/json.schema.$ref: "
        "reference '#/components/schemas/Cat' points at nothing in the spec "
        "(spec 'my-openapi-spec')"]
