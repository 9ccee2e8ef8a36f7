"""`options.asyncapi: {path}` of an http server (an ssekd addition): the config's AsyncAPI 3.0
document at that path, YAML (or JSON when the path ends in `.json`).

It is made on each request from the config the daemon runs and the schemas its catalogs hold
at that moment (`ssekd.asyncapi.held_schema`): a registry that has not answered yet leaves that
payload out rather than making the request wait on it.
"""

from __future__ import annotations

from collections.abc import Mapping

from twisted.web import http
from twisted.web.server import Request

from ssekd.asyncapi import document, to_json, to_yaml
from ssekd.bindings.http.roles import HttpContext
from ssekd.catalogs.catalog import Catalog
from ssekd.config.model import Config

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["path"],
          "x-ssekd-addition": True, "x-ssekd-default": "not served",
          "description": "Serve the AsyncAPI 3.0 document of this config's sse-kafka routes "
                         "(channels, payload schemas from the topics' models, security from "
                         "their guards, servers from the tcp listeners) at `path`, for `GET` "
                         "and `HEAD`, before any route. `ssekd asyncapi --config FILE` prints "
                         "the same document.",
          "properties": {"path": {"type": "string", "pattern": "^/",
                                  "description": "Where it is served, e.g. `/asyncapi.yaml` "
                                                 "(`.json` at the end: JSON)."}}}


class AsyncApiDocument:
    """The http exit that answers with the document (role HTTP)."""

    max_idle = None
    takes_body = False

    def __init__(self, config: Config, catalogs: Mapping[str, Catalog], as_json: bool) -> None:
        self.config = config
        self.catalogs = catalogs
        self.as_json = as_json

    def render(self, request: Request, ctx: HttpContext) -> bytes | int:
        if request.method not in (b"GET", b"HEAD"):
            request.setResponseCode(http.NOT_ALLOWED)
            request.setHeader(b"allow", b"GET, HEAD")
            return b""
        doc = document(self.config, self.catalogs)
        body = (to_json(doc) if self.as_json else to_yaml(doc)).encode()
        request.setHeader(b"content-type", b"application/json" if self.as_json
                          else b"application/yaml; charset=utf-8")
        request.setHeader(b"cache-control", b"no-cache")
        return body
