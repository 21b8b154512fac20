"""A self-signed certificate for 127.0.0.1, made in the test by the ``openssl`` command.

``tls_cert`` (a session fixture) yields the certificate and key files; ``server_context`` is
a server-side context over them. Clients trust the certificate through ``SSL_CERT_FILE``
(OpenSSL's own variable, honoured by loadgen.client.transport.tls_layer.client_context), which
reaches Locust's worker processes too.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loadgen.client.transport import tls_layer

__all__ = ["TlsCert", "server_context", "tls_cert", "trusting"]


@dataclass(frozen=True)
class TlsCert:
    cert: Path
    key: Path


@pytest.fixture(scope="session")
def tls_cert(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCert]:
    """A certificate for IP 127.0.0.1 and localhost, valid for a day (RSA 2048)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    yield TlsCert(cert, key)


def server_context(cert: TlsCert) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert.cert, cert.key)
    return context


@pytest.fixture
def trusting(tls_cert: TlsCert, monkeypatch: pytest.MonkeyPatch) -> Iterator[TlsCert]:
    """``tls_cert`` trusted by this process's client context and by child processes."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_cert.cert))
    tls_layer.client_context.cache_clear()
    yield tls_cert
    tls_layer.client_context.cache_clear()
