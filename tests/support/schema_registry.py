"""A small HTTP server that answers the two Confluent Schema Registry calls ssekd makes, and the
one Zilla's examples register their schemas with.

No Schema Registry can be installed here, so this serves `GET /subjects/{subject}/versions/
{version}` and `GET /schemas/ids/{id}` with the bodies, status codes and error codes the Schema
Registry's API reference documents, and `POST /subjects/{subject}/versions` (register: a body
`{"schema": text, "schemaType"?: AVRO|JSON|PROTOBUF}`, answered `{"id": n}`; the same schema
again under the same subject gives the same id and no new version, as Confluent's and
Karapace's do; 422 with `error_code` 42201 when the body is not that):

- a version: `{"subject", "version", "id", "schema"}`, plus `"schemaType"` when not Avro;
- an id: `{"schema"}`, plus `"schemaType"` when not Avro;
- 404 with `{"error_code": 40401, "message": "Subject 'x' not found."}` (40402 for a version,
  40403 for an id), content type `application/vnd.schemaregistry.v1+json`.

`failing` makes it answer 500 (`error_code` 50001) or a body that is not JSON, to test a registry
that misbehaves; `stop()`/`start()` take it down and bring it back on the same port. Every
request is recorded in `requests`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class Registry:
    """The registry's state and its server thread."""

    def __init__(self) -> None:
        self.subjects: dict[str, list[int]] = {}
        self.schemas: dict[int, tuple[str, str]] = {}  # id -> (schema text, schemaType)
        self.requests: list[str] = []
        #: None, "500" or "garbage".
        self.failing: str | None = None
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def register(self, subject: str, schema: Any, kind: str = "AVRO") -> int:
        """Add `schema` (text or a JSON-able value) as the subject's next version; its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        for sid, (t, k) in self.schemas.items():
            if t == text and k == kind:
                break
        else:
            sid = len(self.schemas) + 1
            self.schemas[sid] = (text, kind)
        self.subjects.setdefault(subject, []).append(sid)
        return sid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Registry:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                registry.requests.append(self.path)
                status, body = registry.answer(self.path)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                registry.requests.append(f"POST {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                status, body = registry.post(self.path, self.rfile.read(length))
                data = json.dumps(body, separators=(",", ":")).encode()  # `{"id":1}`, as test.sh
                # compares it
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.allow_reuse_address = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        """Register a schema (`POST /subjects/{subject}/versions`)."""
        parts = [unquote(p) for p in path.split("?")[0].strip("/").split("/")]
        if len(parts) != 3 or parts[0] != "subjects" or parts[2] != "versions":
            return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}
        try:
            request = json.loads(body)
            text, kind = request["schema"], str(request.get("schemaType", "AVRO")).upper()
        except (ValueError, KeyError, TypeError):
            return 422, {"error_code": 42201, "message": "Invalid schema"}
        if not isinstance(text, str) or kind not in ("AVRO", "JSON", "PROTOBUF"):
            return 422, {"error_code": 42201, "message": "Invalid schema"}
        subject = parts[1]
        for sid in self.subjects.get(subject, []):
            if self.schemas[sid] == (text, kind):
                return 200, {"id": sid}
        return 200, {"id": self.register(subject, text, kind)}

    def answer(self, path: str) -> tuple[int, Any]:
        if self.failing == "500":
            return 500, {"error_code": 50001, "message": "Error in the backend data store"}
        if self.failing == "garbage":
            return 200, b"<html>a proxy's error page</html>"
        parts = [unquote(p) for p in path.split("?")[0].strip("/").split("/")]
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
            sid = int(parts[2])
            if sid not in self.schemas:
                return 404, {"error_code": 40403, "message": f"Schema {sid} not found"}
            text, kind = self.schemas[sid]
            return 200, {"schema": text} | ({} if kind == "AVRO" else {"schemaType": kind})
        if len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
            subject, version = parts[1], parts[3]
            versions = self.subjects.get(subject)
            if not versions:
                return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
            if version in ("latest", "-1"):
                n = len(versions)
            elif version.isdigit() and 1 <= int(version) <= len(versions):
                n = int(version)
            else:
                return 404, {"error_code": 40402, "message": f"Version {version} not found."}
            sid = versions[n - 1]
            text, kind = self.schemas[sid]
            body = {"subject": subject, "version": n, "id": sid, "schema": text}
            return 200, body | ({} if kind == "AVRO" else {"schemaType": kind})
        return 404, {"error_code": 404, "message": "HTTP 404 Not Found"}


def avro_bytes(schema: Any, record: Any) -> bytes:
    """`record` in Avro binary (no header) under `schema`, written by fastavro."""
    import io

    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def wire(schema_id: int, payload: bytes) -> bytes:
    """Confluent's wire format: a zero byte, the schema id (4 bytes, big-endian), the payload."""
    return b"\0" + schema_id.to_bytes(4, "big") + payload
