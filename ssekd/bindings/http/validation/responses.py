"""The http client's check of its upstream's answers (`options.requests[].responses`).

A response its entry selects is held until its body is whole (at most `RESPONSE_BODY_BYTES`):
one whose headers fail is a `503` with `Retry-After: 0` instead (Zilla's answer); one whose
content fails is cut after its head has gone (Zilla's too): the client sees the response end
early (curl exits 18 over HTTP/1.1).
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted.web import http

from ssekd.bindings.http.response_check import Abort, UpstreamAnswer
from ssekd.bindings.http.validation.requests import Refused, Requests, ResponseType, check_value
from ssekd.bindings.http.validation.values import SchemaModel
from ssekd.catalogs.models import Pending

#: The most body bytes of one response held to be checked whole; a bigger one is cut.
RESPONSE_BODY_BYTES = 4 << 20


class ResponseValidation:
    """The http client's check of upstream responses (`options.requests[].responses`): a
    response its entry selects is held until its body is whole, then checked; one that fails is
    cut after its head. The relay asks `wants` when a response head arrives and `check` once its
    body has (both on the reactor, neither waiting: a schema the catalog has not given yet is
    asked for at `wants` and, still missing at `check`, refuses the response)."""

    def __init__(self, requests: Requests, max_body: int = RESPONSE_BODY_BYTES) -> None:
        self.requests = requests
        self._max_body = max_body

    @property
    def max_body(self) -> int:
        return self._max_body

    def _response(self, method: str, path: str, status: int,
                  headers: Iterable[tuple[str, str]]) -> ResponseType | None:
        content_type = next((v for n, v in headers if n.lower() == "content-type"), None)
        for entry in self.requests.entries:
            if entry.responses and entry.matches(method, path) is not None:
                return entry.response(status, content_type)
        return None

    def wants(self, method: str, path: str, status: int,
              headers: tuple[tuple[str, str], ...]) -> bool:
        response = self._response(method, path, status, headers)
        if response is None:
            return False
        for model in (response.content, *response.headers.values()):
            if isinstance(model, SchemaModel):
                model.prepare()
        return True

    def check(self, answer: UpstreamAnswer) -> Abort | None:
        response = self._response(answer.method, answer.path, answer.status, answer.headers)
        if response is None:
            return None
        try:
            for name, value in answer.headers:
                model = response.headers.get(name.lower())
                if model is not None:
                    check_value(model, value.encode("latin-1"), f"header {name.lower()}")
        except Refused as refused:
            return Abort(refused.reason, instead=http.SERVICE_UNAVAILABLE)
        except Pending as pending:
            return Abort(f"the schema is not available yet ({pending})",
                         instead=http.SERVICE_UNAVAILABLE)
        try:
            if response.content is not None and answer.body:
                check_value(response.content, answer.body, "content")
        except Refused as refused:
            return Abort(refused.reason)
        except Pending as pending:
            return Abort(f"the schema is not available yet ({pending})")
        return None
