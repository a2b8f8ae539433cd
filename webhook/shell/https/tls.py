"""Serving TLS: one `ssl.SSLContext` that follows its certificate files, and a self-signed pair.

Kubernetes rotates a mounted Secret in place (the `..data` symlink is swapped to a new folder),
so the files are polled and a changed pair is loaded into the SAME context — new handshakes use
it, open connections keep theirs, no restart. A pair that fails to load is never half-applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import ipaddress
import logging
import os
import ssl
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.shell.process.logs import fields
from webhook.shell.process.metrics import Metrics

logger = logging.getLogger(__name__)

# TLS 1.2 suites: ECDHE + AEAD only (the Mozilla "intermediate" list). TLS 1.3 suites are all
# AEAD already and are not affected by `set_ciphers`.
TLS12_CIPHERS = ":".join(
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
)
DEFAULT_POLL_SECONDS = 5.0


class TLSConfigError(ValueError):
    """The certificate files given at start-up cannot be served; the message names them."""


@dataclass(frozen=True, slots=True)
class CertFiles:
    """Where a certificate pair (and the CA that signed it, if we made it) lives."""

    cert_file: Path
    key_file: Path
    ca_file: Path | None = None


@dataclass(frozen=True, slots=True)
class _Signature:
    """What `stat` says about the resolved files; a change means "read them again"."""

    entries: tuple[tuple[str, int, int, int, int], ...]  # (real path, dev, inode, mtime ns, size)


@dataclass(frozen=True, slots=True)
class _Loaded:
    digest: str  # sha256 over the bytes of cert, key (and client CA)
    fingerprint: str  # sha256 of the leaf certificate (DER), as `openssl x509 -fingerprint` shows
    not_after: datetime.datetime


class ReloadingTLS:
    """A server `SSLContext` that reloads its certificate pair when the files change.

    `context` is built once and handed to the listener; `reload_if_changed()` (called by
    `watch()` every `poll_interval` seconds, or directly by tests) loads a changed pair into it.
    A corrupt, unreadable or mismatched pair is logged as an error and the last good one stays.
    """

    def __init__(
        self,
        cert_file: str | os.PathLike[str],
        key_file: str | os.PathLike[str],
        *,
        client_ca_file: str | os.PathLike[str] | None = None,
        poll_interval: float = DEFAULT_POLL_SECONDS,
        metrics: Metrics | None = None,
    ) -> None:
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca_file = Path(client_ca_file) if client_ca_file is not None else None
        self.poll_interval = poll_interval
        self._metrics = metrics
        self.context = _server_context()
        try:
            signature = self._signature()
            blobs = self._read()
            loaded = self._load(blobs)
            if blobs[2] is not None:
                # Client certificates are verified against this CA. A changed CA file is *added*
                # on reload (OpenSSL stores only grow); removing a CA takes a restart.
                self.context.load_verify_locations(cadata=blobs[2].decode("ascii", "replace"))
                self.context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise TLSConfigError(f"cannot serve {self._names()}: {exc}") from exc
        self._current = loaded
        self._seen: _Signature | None = signature
        self._log_loaded("serving certificate loaded")

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate being served (hex), for logs and tests."""
        return self._current.fingerprint

    @property
    def not_after(self) -> datetime.datetime:
        return self._current.not_after

    def reload_if_changed(self) -> bool:
        """Load the pair again if the files changed; True when a new pair is now served."""
        signature: _Signature | None = None
        error = ""
        try:
            signature = self._signature()
        except OSError as exc:  # mid-rotation or unmounted: None is remembered like a signature
            error = f"cannot stat {self._names()}, still serving the old pair: {exc}"
        if signature == self._seen:
            return False
        self._seen = signature  # a bad state is reported once, not on every poll
        if signature is None:
            return self._failed(error)
        try:
            blobs = self._read()
        except OSError as exc:
            return self._failed(f"cannot read {self._names()}, still serving the old pair: {exc}")
        if _digest(blobs) == self._current.digest:
            return False  # touched or re-linked, same bytes
        try:
            loaded = self._load(blobs)
        except (OSError, ValueError) as exc:
            return self._failed(f"new certificate pair rejected, still serving the old one: {exc}")
        if blobs[2] is not None:
            try:
                self.context.load_verify_locations(cadata=blobs[2].decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as exc:
                self._failed(
                    f"client CA file rejected, still trusting the CAs loaded before: {exc}"
                )
        self._current = loaded
        self._log_loaded("serving certificate reloaded")
        if self._metrics is not None:
            self._metrics.tls_reloads.labels(result="ok").inc()
        return True

    async def watch(self) -> None:
        """Poll the files forever (cancel the task to stop)."""
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                self.reload_if_changed()
            except Exception:  # a reload bug must not end the polling, nor the process
                logger.exception(
                    "certificate reload failed", extra=fields(cert_file=str(self.cert_file))
                )

    # --- internals ---------------------------------------------------------------------------

    def _paths(self) -> list[Path]:
        return [p for p in (self.cert_file, self.key_file, self.client_ca_file) if p is not None]

    def _names(self) -> str:
        return ", ".join(str(p) for p in self._paths())

    def _signature(self) -> _Signature:
        entries = []
        for path in self._paths():
            real = os.path.realpath(path)  # through the Secret volume's `..data` symlink
            st = os.stat(real)
            entries.append((real, st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
        return _Signature(tuple(entries))

    def _read(self) -> tuple[bytes, bytes, bytes | None]:
        ca = self.client_ca_file.read_bytes() if self.client_ca_file is not None else None
        return self.cert_file.read_bytes(), self.key_file.read_bytes(), ca

    def _load(self, blobs: tuple[bytes, bytes, bytes | None]) -> _Loaded:
        cert, key, _ = blobs
        leaf = x509.load_pem_x509_certificate(cert)  # ValueError when not a PEM certificate
        with _as_files(cert, key) as (cert_path, key_path):
            # A failed `load_cert_chain` can leave a context with the new certificate and no
            # key (OpenSSL drops a key that does not match), which fails every handshake. So
            # the pair is proven on a scratch context first, from the very same bytes.
            _server_context().load_cert_chain(cert_path, key_path)
            self.context.load_cert_chain(cert_path, key_path)
        return _Loaded(
            digest=_digest(blobs),
            fingerprint=leaf.fingerprint(hashes.SHA256()).hex(),
            not_after=leaf.not_valid_after_utc,
        )

    def _failed(self, message: str) -> bool:
        logger.error(
            message, extra=fields(cert_file=str(self.cert_file), key_file=str(self.key_file))
        )
        if self._metrics is not None:
            self._metrics.tls_reloads.labels(result="error").inc()
        return False

    def _log_loaded(self, message: str) -> None:
        logger.info(
            message,
            extra=fields(
                cert_file=str(self.cert_file),
                sha256=self._current.fingerprint,
                not_after=self._current.not_after.isoformat(),
            ),
        )
        if self._metrics is not None:
            self._metrics.tls_not_after.set(self._current.not_after.timestamp())


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


def _digest(blobs: Iterable[bytes | None]) -> str:
    h = hashlib.sha256()
    for blob in blobs:
        h.update(b"-" if blob is None else hashlib.sha256(blob).digest())
    return h.hexdigest()


@contextlib.contextmanager
def _as_files(*blobs: bytes) -> Iterator[list[str]]:
    """Paths OpenSSL can open for these bytes (it loads keys from paths only).

    On Linux an anonymous memory file: no key material written to a disk, and it works on a
    read-only root filesystem. Elsewhere a private temporary folder.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fds = [os.memfd_create("policy-webhook-tls", os.MFD_CLOEXEC) for _ in blobs]
        try:
            for fd, blob in zip(fds, blobs, strict=True):
                os.write(fd, blob)
            yield [f"/proc/self/fd/{fd}" for fd in fds]
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="policy-webhook-tls-") as folder:
        paths = []
        for i, blob in enumerate(blobs):
            path = os.path.join(folder, f"{i}.pem")
            _write_private(Path(path), blob)
            paths.append(path)
        yield paths


# --- self-signed pair for cluster-less runs ---------------------------------------------------


_CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def self_signed(
    directory: str | os.PathLike[str],
    *,
    dns_names: Sequence[str] = (),
    valid_days: int = 365,
) -> CertFiles:
    """Make a CA and a serving certificate signed by it; write ca.crt, tls.crt, tls.key.

    SANs: localhost, 127.0.0.1, ::1 and `dns_names` (e.g. `svc.ns.svc`). The caller logs where
    `ca.crt` is: it is the `caBundle` a webhook configuration needs to trust us.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = (
        now - datetime.timedelta(minutes=5),
        now + datetime.timedelta(days=valid_days),
    )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "policy-webhook self-signed CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_CA_KEY_USAGE, critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName("localhost")]
    sans += [x509.DNSName(name) for name in dns_names if name != "localhost"]
    sans += [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [x509.NameAttribute(NameOID.COMMON_NAME, (list(dns_names) or ["localhost"])[0])]
            )
        )
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )

    files = CertFiles(
        cert_file=folder / "tls.crt", key_file=folder / "tls.key", ca_file=folder / "ca.crt"
    )
    assert files.ca_file is not None
    files.ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.key_file,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
    return files


def _write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner can read (a private key)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)  # O_CREAT's mode does not apply to a file that existed
