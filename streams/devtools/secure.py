"""What makes the local broker secure (``traintrace broker start --secure``): a throw-away CA,
the broker's certificate, SCRAM users, the authorizer, and one client properties file per role.

Kept apart from :mod:`streams.devtools.broker` so the default (PLAINTEXT) broker is untouched by
it. Layout under the broker's data directory::

    secure/
      ca.pem, ca.key           the throw-away CA (valid 30 days; regenerated when expired)
      broker.pem, broker.key   the broker's certificate for 127.0.0.1 and localhost
      users.json               the SCRAM users' passwords (mode 0600; made once, at format time)
      <role>.properties        librdkafka client properties of each role (mode 0600, like
                               ``kcat -F``): admin, trainer, processor, operator, auditor

Clients connect to ``SASL_SSL`` (SCRAM-SHA-512) on 127.0.0.1; the controller listener is mutual
TLS on loopback, its principal the broker's certificate, and only ``admin`` and the broker are
super users: every other principal gets exactly what :mod:`streams.kafka.acls` grants.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import secrets
from pathlib import Path
from typing import Any

from streams.kafka.acls import ROLES

SECURE_DIR = "secure"
USERS_FILE = "users.json"
ADMIN = "admin"
CLIENT_ROLES = (ADMIN, *ROLES)
MECHANISM = "SCRAM-SHA-512"
BROKER_CN = "traintrace-local-broker"
BROKER_PRINCIPAL = f"User:CN={BROKER_CN}"
SECURE_LISTENER = "SASL_SSL"
_VALID = dt.timedelta(days=30)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by its owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(path, 0o600)


def _cert_valid(path: Path) -> bool:
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return False
    return cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc) > dt.timedelta(days=1)


def _name(cn: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(subject: str, key, issuer_key, issuer_name, *, ca: bool):
    """A certificate for ``subject`` signed by ``issuer_key`` (self-signed when the same)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = dt.datetime.now(dt.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + _VALID)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=0 if ca else None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        builder = (builder
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                               x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    return builder.sign(issuer_key, hashes.SHA256())


def ensure_pki(secure_dir: Path) -> dict[str, Path]:
    """The CA and the broker's certificate and key (PEM, PKCS#8) in ``secure_dir``, made when
    missing or about to expire. Returns their paths: ca, ca_key, cert, key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    secure_dir.mkdir(parents=True, exist_ok=True)
    paths = {"ca": secure_dir / "ca.pem", "ca_key": secure_dir / "ca.key",
             "cert": secure_dir / "broker.pem", "key": secure_dir / "broker.key"}
    if all(p.is_file() for p in paths.values()) and _cert_valid(paths["ca"]) and _cert_valid(paths["cert"]):
        return paths
    pem = serialization.Encoding.PEM
    pkcs8 = serialization.PrivateFormat.PKCS8
    plain = serialization.NoEncryption()
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _issue("traintrace local CA", ca_key, ca_key, _name("traintrace local CA"), ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _issue(BROKER_CN, key, ca_key, ca_cert.subject, ca=False)
    _write_private(paths["ca_key"], ca_key.private_bytes(pem, pkcs8, plain))
    paths["ca"].write_bytes(ca_cert.public_bytes(pem))
    _write_private(paths["key"], key.private_bytes(pem, pkcs8, plain))
    paths["cert"].write_bytes(cert.public_bytes(pem) + ca_cert.public_bytes(pem))  # the chain
    return paths


def ensure_users(secure_dir: Path) -> dict[str, str]:
    """Role -> SCRAM password (``users.json``, made once: the users exist from format time)."""
    path = secure_dir / USERS_FILE
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    secure_dir.mkdir(parents=True, exist_ok=True)
    users = {role: secrets.token_urlsafe(24) for role in CLIENT_ROLES}
    _write_private(path, (json.dumps(users, indent=2) + "\n").encode())
    return users


def scram_format_args(users: dict[str, str]) -> list[str]:
    """``kafka-storage format`` arguments creating every user (``--add-scram``)."""
    out: list[str] = []
    for name, password in users.items():
        out += ["--add-scram", f"{MECHANISM}=[name={name},password={password}]"]
    return out


def _jaas(user: str, password: str) -> str:
    return f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";'


def server_overrides(port: int, controller_port: int, pki: dict[str, Path], users: dict[str, str]) -> dict[str, Any]:
    """The ``server.properties`` keys of a secure node (over :func:`~streams.devtools.broker.server_properties`)."""
    lo = "127.0.0.1"
    ssl_common = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki["cert"].with_name("broker.keystore.pem")),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki["ca"]),
        "ssl.endpoint.identification.algorithm": "https",
    }
    return {
        "listeners": f"{SECURE_LISTENER}://{lo}:{port},CONTROLLER://{lo}:{controller_port}",
        "advertised.listeners": f"{SECURE_LISTENER}://{lo}:{port}",
        "inter.broker.listener.name": SECURE_LISTENER,
        "listener.security.protocol.map": f"{SECURE_LISTENER}:SASL_SSL,CONTROLLER:SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config": _jaas(ADMIN, users[ADMIN]),
        "listener.name.controller.ssl.client.auth": "required",
        **ssl_common,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN};{BROKER_PRINCIPAL}",
    }


def write_keystore(pki: dict[str, Path]) -> Path:
    """The broker's PEM keystore: its unencrypted PKCS#8 key followed by its chain (Kafka reads
    both from one file with ``ssl.keystore.type=PEM``)."""
    path = pki["cert"].with_name("broker.keystore.pem")
    _write_private(path, pki["key"].read_bytes() + pki["cert"].read_bytes())
    return path


def client_properties(role: str, password: str, ca: Path) -> dict[str, str]:
    """The librdkafka properties of ``role`` on the secure local broker."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": role,
        "sasl.password": password,
        "ssl.ca.location": str(ca),
    }


def write_client_files(secure_dir: Path, users: dict[str, str], ca: Path, bootstrap: str) -> dict[str, str]:
    """``<role>.properties`` for every role (mode 0600); returns role -> path."""
    out = {}
    for role, password in users.items():
        path = secure_dir / f"{role}.properties"
        lines = [f"# traintrace local secure broker at {bootstrap}: the {role} role's client settings",
                 "# use: TRAINTRACE_KAFKA_CONFIG=<this file> (or kcat -F <this file> -b " + bootstrap + ")"]
        lines += [f"{k}={v}" for k, v in client_properties(role, password, ca).items()]
        _write_private(path, ("\n".join(lines) + "\n").encode())
        out[role] = str(path)
    return out
