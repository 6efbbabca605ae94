"""A run's security settings: its secret, optional TLS material, and the wire's limits.

Every connection of a run (a site's data and control connections to the driver, the links
between sites, the StateMover's connections) starts with a mutual challenge-response over
this secret (``runtime/handshake.py``) before any frame is decoded (docs/design.md §7). The driver
creates the secret, or takes the user's (``SPARKFLUX_SECRET`` or the Spark configuration key
``spark.sparkflux.secret``, for clusters that distribute secrets themselves), and hands it to
the site tasks inside the Spark job, as it hands them the plan.

With ``tls`` the driver also makes a throw-away key and self-signed certificate for the run;
every process presents it and accepts only a peer that presents the same one (mutual TLS with
the run's certificate as the only trusted root), and the handshake then runs inside TLS. Use it
for links that cross a network: the handshake alone proves who opened a connection, but does
not protect what follows it from someone on the path.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import os
import secrets
import ssl
import tempfile
from dataclasses import dataclass

SECRET_ENV = "SPARKFLUX_SECRET"  # noqa: S105 - the name of the variable, not a secret
SECRET_CONF = "spark.sparkflux.secret"  # noqa: S105 - a configuration key
MIN_SECRET_CHARS = 16
TLS_NAME = "sparkflux"
MiB = 1 << 20
DEFAULT_MAX_FRAME = 256 * MiB
# A moved partition's state is one frame on the StateMover's connection; the frame header's
# u32 length is the hard ceiling.
DEFAULT_MAX_STATE_FRAME = (4 << 30) - 1
HANDSHAKE_TIMEOUT_S = 5.0
MAX_PENDING = 64  # unauthenticated connections a server holds at once; more are closed


class SecurityError(ValueError):
    """A security setting that cannot work; the message says what to change."""


@dataclass(frozen=True)
class Security:
    """What every process of a run needs to authenticate its connections (picklable: it
    travels to the site tasks with the Spark job)."""

    secret: bytes
    tls_cert: bytes | None = None  # PEM, the run's certificate (TLS on)
    tls_key: bytes | None = None
    max_frame: int = DEFAULT_MAX_FRAME
    max_state_frame: int = DEFAULT_MAX_STATE_FRAME
    handshake_timeout: float = HANDSHAKE_TIMEOUT_S
    max_pending: int = MAX_PENDING

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def server_ssl(self) -> ssl.SSLContext | None:
        return _contexts(self.tls_cert, self.tls_key)[0] if self.tls else None

    def client_ssl(self) -> ssl.SSLContext | None:
        return _contexts(self.tls_cert, self.tls_key)[1] if self.tls else None

    def __repr__(self) -> str:  # never print the secret or the key
        return (f"Security(tls={self.tls}, max_frame={self.max_frame}, "
                f"max_state_frame={self.max_state_frame})")


def resolve_secret(conf_value: str | None = None) -> tuple[bytes, str]:
    """The run's secret and where it came from: the environment, the Spark configuration, or
    a fresh random one."""
    for value, origin in ((os.environ.get(SECRET_ENV), f"${SECRET_ENV}"),
                          (conf_value, SECRET_CONF)):
        if value:
            if len(value) < MIN_SECRET_CHARS:
                raise SecurityError(
                    f"the secret from {origin} has {len(value)} characters; use at least "
                    f"{MIN_SECRET_CHARS} (e.g. the output of `python -c \"import secrets; "
                    f"print(secrets.token_hex(32))\"`)")
            return hashlib.sha256(b"sparkflux run secret\0" + value.encode()).digest(), origin
    return secrets.token_bytes(32), "generated for this run"


def make_security(secret: bytes, tls: bool = False, max_frame_mb: float | None = None
                  ) -> Security:
    if max_frame_mb is not None and not 1 <= max_frame_mb <= 4095:
        raise SecurityError(f"--max-frame-mb {max_frame_mb}: give a size from 1 to 4095 MB")
    cert = key = None
    if tls:
        cert, key = self_signed()
    kw = {} if max_frame_mb is None else {"max_frame": int(max_frame_mb * MiB)}
    return Security(secret=secret, tls_cert=cert, tls_key=key, **kw)


def self_signed() -> tuple[bytes, bytes]:
    """A throw-away EC key and a self-signed certificate for ``TLS_NAME`` (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, TLS_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(TLS_NAME)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


@functools.lru_cache(maxsize=4)
def _contexts(cert: bytes | None, key: bytes | None) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """Server and client contexts that present the run's certificate and trust only it."""
    assert cert is not None and key is not None
    with tempfile.TemporaryDirectory() as d:
        cpath, kpath = os.path.join(d, "run.crt"), os.path.join(d, "run.key")
        fd = os.open(kpath, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        with open(cpath, "wb") as f:
            f.write(cert)
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        for ctx in (server, client):
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            ctx.load_cert_chain(cpath, kpath)
            ctx.load_verify_locations(cadata=cert.decode())
        server.verify_mode = ssl.CERT_REQUIRED
        client.check_hostname = True
        client.verify_mode = ssl.CERT_REQUIRED
    return server, client
