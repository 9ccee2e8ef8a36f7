"""The TLS test PKI, for the config tests that need a vault."""

from tests.tls.conftest import pki  # noqa: F401 - a fixture
