"""Certificates for the local control plane, made with ``cryptography``.

One CA signs the API server's serving certificate (valid for 127.0.0.1,
localhost and the in-cluster service names) and an admin client certificate in
``system:masters``.  A separate RSA key signs service-account tokens.  The
same CA also serves webhooks on loopback later, so kopf needs no
self-signing libraries.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=3650)
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


def _name(common: str, organization: str = "") -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue(
    *,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    usages: list[x509.ObjectIdentifier],
    names: tuple[str, ...] = (),
    addresses: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer.subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if issuer is None:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alternatives += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
    if alternatives:
        builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def create(directory: Path, *, service_ip: str = "10.96.0.1") -> Pki:
    """Write a fresh CA, API server certificate, admin certificate and SA key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(
        subject=_name("queue-controller-local-ca"),
        key=ca_key,
        issuer=None,
        issuer_key=ca_key,
        usages=[],
    )
    _write_key(pki.ca_key, ca_key)
    pki.ca_cert.write_bytes(_pem(ca))

    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        subject=_name("kube-apiserver"),
        key=server_key,
        issuer=ca,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        names=_SERVER_NAMES,
        addresses=("127.0.0.1", "::1", service_ip),
    )
    _write_key(pki.server_key, server_key)
    pki.server_cert.write_bytes(_pem(server))

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _issue(
        subject=_name("kubernetes-admin", "system:masters"),
        key=admin_key,
        issuer=ca,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    _write_key(pki.admin_key, admin_key)
    pki.admin_cert.write_bytes(_pem(admin))

    # Service-account tokens are signed with RSA, which every consumer accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


@dataclass(frozen=True)
class ServingCertificate:
    certfile: Path
    keyfile: Path
    cafile: Path


def serving_certificate(directory: Path, *, hosts: tuple[str, ...]) -> ServingCertificate:
    """A throwaway CA and a server certificate for ``hosts`` (names or IPs): for a webhook
    served on loopback, whose caBundle the API server is then given."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(
        subject=_name("queue-controller-webhook-ca"),
        key=ca_key,
        issuer=None,
        issuer_key=ca_key,
        usages=[],
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names, addresses = [], []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            addresses.append(host)
        except ValueError:
            names.append(host)
    cert = _issue(
        subject=_name(hosts[0]),
        key=key,
        issuer=ca,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        names=tuple(names),
        addresses=tuple(addresses),
    )
    out = ServingCertificate(directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
    _write_key(out.keyfile, key)
    out.certfile.write_bytes(_pem(cert))
    out.cafile.write_bytes(_pem(ca))
    return out
