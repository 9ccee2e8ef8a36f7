"""A stand-in for open-api-mocker (jormaechea/open-api-mocker 2.0.0, the upstream of Zilla's
openapi.proxy example), which is not Zilla and cannot be installed here: an HTTP/1.1 server
that reads an OpenAPI 3 spec and answers each of its operations as the mocker does.

- A request whose path and method are an operation of the spec is answered with the operation's
  first 2xx response: its status, and for JSON content a body generated from the schema as the
  mocker generates it (`example`s first; else an object of every property, an array of one
  item, `1` for a number or integer, `"string"` for a string, `true` for a boolean).
  So the petstore's `GET /pets` is `[{"id":1,"name":"string","tag":"string"}]`, what the
  example's test.sh expects.
- A request body the operation's JSON `requestBody` schema refuses is `400` (the mocker checks
  requests); any other path or method is `404`.

Every request is recorded in `requests` (method, path, headers, body).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import yaml

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


class OpenapiMock:
    def __init__(self, spec: Path) -> None:
        self.spec: dict[str, Any] = yaml.safe_load(spec.read_text(encoding="utf-8"))
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.port = 0
        self._server: ThreadingHTTPServer | None = None

    # -- the spec ---------------------------------------------------------------------------

    def _deref(self, value: Any) -> Any:
        if isinstance(value, dict) and isinstance(value.get("$ref"), str):
            target: Any = self.spec
            for part in value["$ref"][2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            return self._deref(target)
        if isinstance(value, dict):
            return {k: self._deref(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._deref(v) for v in value]
        return value

    def operation(self, method: str, path: str) -> dict[str, Any] | None:
        for template, item in (self.spec.get("paths") or {}).items():
            pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
            if re.fullmatch(pattern, path) and method.lower() in item:
                return dict(self._deref(item[method.lower()]))
        return None

    def example(self, schema: Any) -> Any:
        """A value of `schema`, as open-api-mocker makes one."""
        if not isinstance(schema, dict):
            return None
        if "example" in schema:
            return schema["example"]
        kind = schema.get("type")
        if kind == "array":
            return [self.example(schema.get("items") or {})]
        if kind == "object" or "properties" in schema:
            return {k: self.example(v) for k, v in (schema.get("properties") or {}).items()}
        return {"integer": 1, "number": 1, "string": "string", "boolean": True}.get(
            str(kind))

    def answer(self, method: str, path: str, body: bytes) -> tuple[int, bytes | None]:
        op = self.operation(method, path)
        if op is None:
            return 404, json.dumps({"message": "Path not found"}).encode()
        request = op.get("requestBody") or {}
        schema = ((request.get("content") or {}).get("application/json") or {}).get("schema")
        if schema is not None:
            try:
                jsonschema.validate(json.loads(body or b"null"), schema)
            except (ValueError, jsonschema.ValidationError) as e:
                return 400, json.dumps({"message": f"Request has errors: {e}"[:200]}).encode()
        for status, response in (op.get("responses") or {}).items():
            if str(status).startswith("2"):
                content = (response.get("content") or {}).get("application/json")
                if content is None:
                    return int(status), None
                return int(status), json.dumps(self.example(content.get("schema")),
                                               separators=(",", ":")).encode()
        return 200, None

    # -- the server -------------------------------------------------------------------------

    def start(self) -> None:
        mock = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                mock.requests.append((self.command, self.path,
                                      {k.lower(): v for k, v in self.headers.items()}, body))
                status, out = mock.answer(self.command, path, body)
                self.send_response(status)
                if out is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out or b"")))
                self.end_headers()
                if out:
                    self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
