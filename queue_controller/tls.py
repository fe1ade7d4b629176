"""TLS serving certificates, and the certificate helpers behind them, made with ``cryptography``.

The controller serves its mutating webhook over TLS: ``serving_certificate``
makes a throwaway CA and a server certificate for it when no certificate
directory is mounted.  The local control plane (``localcluster.pki``) issues
its own cluster PKI with the same helpers (``name``, ``issue``, ``write_key``,
``pem``).

Why a module of its own, directly under ``queue_controller``: both users need
it and neither owns it.  The controller must not depend on ``localcluster``, a
development tool for running a control plane on this machine; and ``kube`` is
the adapter for API objects, which certificates are not.  Here it sits in the
top-level layers next to ``kube`` (below ``controller`` and ``localcluster``,
which import it) and imports nothing from this package, only ``cryptography``.
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


def name(common: str, organization: str = "") -> x509.Name:
    """A subject or issuer name: a common name, and an organization if given."""
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    """Write ``key`` as unencrypted PKCS#8 PEM, readable by its owner only."""
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def issue(
    *,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    usages: list[x509.ObjectIdentifier],
    names: tuple[str, ...] = (),
    addresses: tuple[str, ...] = (),
) -> x509.Certificate:
    """Sign a certificate: a self-signed CA when ``issuer`` is None, else a leaf for ``usages``
    valid for the DNS ``names`` and IP ``addresses``."""
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


def pem(cert: x509.Certificate) -> bytes:
    """The certificate as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass(frozen=True)
class ServingCertificate:
    """Where a serving certificate, its key and the CA that signed it lie, as PEM files."""

    certfile: Path
    keyfile: Path
    cafile: Path


def serving_certificate(directory: Path, *, hosts: tuple[str, ...]) -> ServingCertificate:
    """A throwaway CA and a server certificate for ``hosts`` (names or IPs): for a webhook
    served on loopback, whose caBundle the API server is then given."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue(
        subject=name("queue-controller-webhook-ca"),
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
    cert = issue(
        subject=name(hosts[0]),
        key=key,
        issuer=ca,
        issuer_key=ca_key,
        usages=[ExtendedKeyUsageOID.SERVER_AUTH],
        names=tuple(names),
        addresses=tuple(addresses),
    )
    out = ServingCertificate(directory / "tls.crt", directory / "tls.key", directory / "ca.crt")
    write_key(out.keyfile, key)
    out.certfile.write_bytes(pem(cert))
    out.cafile.write_bytes(pem(ca))
    return out
