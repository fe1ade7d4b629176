"""Certificates for the local control plane, made with ``cryptography``.

One CA signs the API server's serving certificate (valid for 127.0.0.1,
localhost and the in-cluster service names) and an admin client certificate in
``system:masters``.  A separate RSA key signs service-account tokens.  The
certificate helpers are the shared ones in ``queue_controller.tls``, which also
makes the webhook's serving certificate, so kopf needs no self-signing
libraries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from queue_controller import tls

_SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def admin_cert(self) -> Path:
        return self.directory / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.directory / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"


def create(directory: Path, *, service_ip: str = "10.96.0.1") -> Pki:
    """Write a fresh CA, API server certificate, admin certificate and SA key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = tls.issue(
        subject=tls.name("queue-controller-local-ca"),
        key=ca_key,
        issuer=None,
        issuer_key=ca_key,
        usages=[],
    )
    tls.write_key(pki.ca_key, ca_key)
    pki.ca_cert.write_bytes(tls.pem(ca))

    server_key = ec.generate_private_key(ec.SECP256R1())
    server = tls.issue(
        subject=tls.name("kube-apiserver"),
        key=server_key,
        issuer=ca,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        names=_SERVER_NAMES,
        addresses=("127.0.0.1", "::1", service_ip),
    )
    tls.write_key(pki.server_key, server_key)
    pki.server_cert.write_bytes(tls.pem(server))

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = tls.issue(
        subject=tls.name("kubernetes-admin", "system:masters"),
        key=admin_key,
        issuer=ca,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    tls.write_key(pki.admin_key, admin_key)
    pki.admin_cert.write_bytes(tls.pem(admin))

    # Service-account tokens are signed with RSA, which every consumer accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    tls.write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
