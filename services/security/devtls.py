"""A throwaway CA and server certificate for development stacks and tests.

Production sites get their certificate from a real CA (cert-manager, the site PKI); this
exists so ``docker compose up`` and the tests run the same TLS code paths (``tls://`` and
``wss://`` with a CA file) without a PKI. Needs the ``cryptography`` package
(``pip install 'interlink-nats[tls]'``), imported lazily so the runtime does not depend on it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.x509 import Certificate


class DevTlsUnavailableError(RuntimeError):
    """``cryptography`` is not installed."""


@dataclass(frozen=True)
class DevTlsFiles:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def _crypto() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise DevTlsUnavailableError(
            "generating development certificates needs the 'cryptography' package: pip install 'interlink-nats[tls]'"
        ) from exc


def _key() -> EllipticCurvePrivateKey:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: Certificate) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def make_ca(common_name: str = "interlink-nats dev CA", days: int = 30) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a self-signed CA that may only sign end-entity certificates."""
    _crypto()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _pem_cert(cert), _pem_key(key)


def make_server_cert(
    ca_cert_pem: bytes, ca_key_pem: bytes, hosts: list[str], days: int = 30, *, client: bool = False
) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for ``hosts`` (DNS names or IP addresses), signed by the CA.

    ``client=True`` also allows the certificate for TLS client authentication (mutual TLS).
    """
    _crypto()
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not hosts:
        raise ValueError("a server certificate needs at least one host name or address")
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC private key, as make_ca writes it")
    key = _key()
    sans: list[x509.GeneralName] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _pem_cert(cert), _pem_key(key)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def write_dev_tls(out_dir: Path, hosts: list[str], days: int = 30, *, client: bool = False) -> DevTlsFiles:
    """Write ``ca.pem``/``ca-key.pem``/``server.pem``/``server-key.pem`` (keys 0600) into ``out_dir``.

    An existing CA in ``out_dir`` is reused so re-running keeps sites' CA files valid. ``client``: the
    certificate also authenticates its holder as a TLS client (cluster nodes dial each other's routes).
    """
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = DevTlsFiles(
        ca_cert=out_dir / "ca.pem",
        ca_key=out_dir / "ca-key.pem",
        server_cert=out_dir / "server.pem",
        server_key=out_dir / "server-key.pem",
    )
    if files.ca_cert.exists() and files.ca_key.exists():
        ca_cert, ca_key = files.ca_cert.read_bytes(), files.ca_key.read_bytes()
    else:
        ca_cert, ca_key = make_ca(days=days)
        _write(files.ca_key, ca_key, 0o600)
        _write(files.ca_cert, ca_cert, 0o644)
    cert, key = make_server_cert(ca_cert, ca_key, hosts, days, client=client)
    _write(files.server_key, key, 0o600)
    _write(files.server_cert, cert, 0o644)
    return files
