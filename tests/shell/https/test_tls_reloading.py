"""Serving certificates: rotation without restart, bad pairs kept out, the TLS policy, self-signed."""

from __future__ import annotations

import http.client
import logging
import os
import ssl
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trustme
from cryptography import x509

from tests.fixtures.https import RunningWebhook, sha256_of_leaf, write_pair
from webhook.shell.https.tls import ReloadingTLS, TLSConfigError, self_signed
from webhook.shell.process.metrics import Metrics


class SecretVolume:
    """A folder laid out as the kubelet mounts a Secret: files are symlinks through `..data`,
    and an update writes a new timestamped folder, then swaps `..data` atomically."""

    def __init__(self, root: Path, cert: trustme.LeafCert) -> None:
        self.root = root
        self.generation = 0
        root.mkdir()
        self._write(cert)
        for name in ("tls.crt", "tls.key"):
            os.symlink(f"..data/{name}", root / name)

    @property
    def cert_file(self) -> Path:
        return self.root / "tls.crt"

    @property
    def key_file(self) -> Path:
        return self.root / "tls.key"

    def rotate(self, cert: trustme.LeafCert) -> None:
        self._write(cert)

    def _write(self, cert: trustme.LeafCert) -> None:
        self.generation += 1
        folder = f"..2025_01_01_00_00_{self.generation:02d}"
        write_pair(cert, self.root / folder)
        os.symlink(folder, self.root / "..data_tmp")
        os.replace(self.root / "..data_tmp", self.root / "..data")


@pytest.fixture(scope="module")
def second_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def rotated_cert(second_ca: trustme.CA) -> trustme.LeafCert:
    return second_ca.issue_cert("127.0.0.1", "localhost")


@pytest.fixture(scope="module")
def trusts_both(ca: trustme.CA, second_ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    second_ca.configure_trust(context)
    return context


def test_a_rotated_secret_is_served_after_reload_without_restart(
    tmp_path: Path,
    start_webhook: Callable[..., RunningWebhook],
    serving_cert: trustme.LeafCert,
    rotated_cert: trustme.LeafCert,
    trusts_both: ssl.SSLContext,
) -> None:
    volume = SecretVolume(tmp_path / "secret", serving_cert)
    tls = ReloadingTLS(volume.cert_file, volume.key_file, poll_interval=0)
    with start_webhook(tls=tls) as hook:
        assert hook.peer_certificate_sha256(trusts_both) == sha256_of_leaf(serving_cert)
        kept_open = http.client.HTTPSConnection("127.0.0.1", hook.port, context=trusts_both)
        kept_open.request("GET", "/healthz")
        assert kept_open.getresponse().read() == b"ok"

        volume.rotate(rotated_cert)
        assert hook.in_loop(tls.reload_if_changed) is True

        assert hook.peer_certificate_sha256(trusts_both) == sha256_of_leaf(rotated_cert)
        assert tls.fingerprint == sha256_of_leaf(rotated_cert)
        # A connection opened before the rotation keeps working on its own handshake.
        kept_open.request("GET", "/healthz")
        assert kept_open.getresponse().read() == b"ok"
        kept_open.close()
        assert hook.in_loop(tls.reload_if_changed) is False  # nothing changed since


def test_the_poll_picks_up_a_pair_rewritten_in_place(
    tmp_path: Path,
    start_webhook: Callable[..., RunningWebhook],
    serving_cert: trustme.LeafCert,
    rotated_cert: trustme.LeafCert,
    trusts_both: ssl.SSLContext,
) -> None:
    cert_file, key_file = write_pair(serving_cert, tmp_path)
    metrics = Metrics()
    tls = ReloadingTLS(cert_file, key_file, poll_interval=0.05, metrics=metrics)
    with start_webhook(tls=tls, metrics=metrics) as hook:
        hook.client_context = trusts_both
        write_pair(rotated_cert, tmp_path)
        deadline = time.monotonic() + 10
        while hook.peer_certificate_sha256(trusts_both) != sha256_of_leaf(rotated_cert):
            assert time.monotonic() < deadline, "the new certificate was never served"
            time.sleep(0.05)
        assert hook.request("GET", "/readyz").status == 200
        assert (
            b'policy_webhook_tls_reloads_total{result="ok"} 1.0'
            in hook.request("GET", "/metrics").body
        )


# Breaks the pair on disk, given (certificate file, key file, another valid certificate).
Damage = Callable[[Path, Path, trustme.LeafCert], None]


def corrupt_cert(cert_file: Path, key_file: Path, other: trustme.LeafCert) -> None:
    cert_file.write_bytes(
        b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )


def mismatched_key(cert_file: Path, key_file: Path, other: trustme.LeafCert) -> None:
    other.cert_chain_pems[0].write_to_path(cert_file)  # new certificate, old key


def empty_key(cert_file: Path, key_file: Path, other: trustme.LeafCert) -> None:
    key_file.write_bytes(b"")


def missing_cert(cert_file: Path, key_file: Path, other: trustme.LeafCert) -> None:
    cert_file.unlink()


@pytest.mark.parametrize("damage", [corrupt_cert, mismatched_key, empty_key, missing_cert])
def test_a_bad_pair_is_rejected_and_the_last_good_one_keeps_serving(
    tmp_path: Path,
    start_webhook: Callable[..., RunningWebhook],
    serving_cert: trustme.LeafCert,
    rotated_cert: trustme.LeafCert,
    trusts_both: ssl.SSLContext,
    caplog: pytest.LogCaptureFixture,
    damage: Damage,
) -> None:
    cert_file, key_file = write_pair(serving_cert, tmp_path)
    tls = ReloadingTLS(cert_file, key_file, poll_interval=0)
    with start_webhook(tls=tls) as hook:
        damage(cert_file, key_file, rotated_cert)
        caplog.set_level(logging.INFO)
        assert hook.in_loop(tls.reload_if_changed) is False
        assert hook.in_loop(tls.reload_if_changed) is False  # reported once, not on every poll
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "still serving the old" in errors[0].getMessage()

        assert hook.peer_certificate_sha256(trusts_both) == sha256_of_leaf(serving_cert)
        assert hook.request("GET", "/healthz").status == 200

        write_pair(rotated_cert, tmp_path)  # the operator fixes the Secret
        assert hook.in_loop(tls.reload_if_changed) is True
        assert hook.peer_certificate_sha256(trusts_both) == sha256_of_leaf(rotated_cert)


def test_an_unusable_pair_at_start_up_is_an_error_naming_the_files(
    tmp_path: Path, serving_cert: trustme.LeafCert, rotated_cert: trustme.LeafCert
) -> None:
    cert_file, key_file = write_pair(serving_cert, tmp_path)
    rotated_cert.cert_chain_pems[0].write_to_path(cert_file)
    with pytest.raises(TLSConfigError, match=r"tls\.crt"):
        ReloadingTLS(cert_file, key_file)
    with pytest.raises(TLSConfigError):
        ReloadingTLS(tmp_path / "absent.crt", key_file)
    write_pair(serving_cert, tmp_path)
    not_a_ca = tmp_path / "client-ca.crt"
    not_a_ca.write_text("not a certificate")
    with pytest.raises(TLSConfigError, match=r"client-ca\.crt"):
        ReloadingTLS(cert_file, key_file, client_ca_file=not_a_ca)


# --- the TLS policy ------------------------------------------------------------------------------


def handshake(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    import socket

    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_the_context_accepts_nothing_older_than_tls_1_2(webhook: RunningWebhook) -> None:
    # Not provable by a handshake here: OpenSSL 3 clients refuse TLS 1.1 before asking.
    assert webhook.tls.context.minimum_version == ssl.TLSVersion.TLSv1_2


def test_tls_1_2_offers_only_aead_suites(webhook: RunningWebhook, ca: trustme.CA) -> None:
    cbc_only = ssl.create_default_context()
    ca.configure_trust(cbc_only)
    cbc_only.maximum_version = ssl.TLSVersion.TLSv1_2
    cbc_only.set_ciphers("ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:AES128-SHA")
    with pytest.raises(ssl.SSLError):
        handshake(webhook.port, cbc_only).close()

    tls12 = ssl.create_default_context()
    ca.configure_trust(tls12)
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    with handshake(webhook.port, tls12) as sock:
        cipher = sock.cipher()  # None only before the handshake, which `wrap_socket` has done
        assert cipher is not None
        name, version, _ = cipher
        assert version == "TLSv1.2"
        assert "GCM" in name or "CHACHA20" in name


def test_tls_1_3_is_served(webhook: RunningWebhook, client_context: ssl.SSLContext) -> None:
    with handshake(webhook.port, client_context) as sock:
        assert sock.version() == "TLSv1.3"


def test_a_client_ca_makes_client_certificates_required(
    tmp_path: Path,
    ca: trustme.CA,
    serving_cert: trustme.LeafCert,
    start_webhook: Callable[..., RunningWebhook],
) -> None:
    cert_file, key_file = write_pair(serving_cert, tmp_path)
    client_ca = tmp_path / "client-ca.crt"
    ca.cert_pem.write_to_path(client_ca)
    tls = ReloadingTLS(cert_file, key_file, client_ca_file=client_ca, poll_interval=0)
    with start_webhook(tls=tls) as hook:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            hook.request("GET", "/healthz")  # no client certificate

        with_cert = ssl.create_default_context()
        ca.configure_trust(with_cert)
        ca.issue_cert("kube-apiserver").configure_cert(with_cert)
        hook.client_context = with_cert
        assert hook.request("GET", "/healthz").status == 200


# --- self-signed ---------------------------------------------------------------------------------


def test_self_signed_writes_a_ca_and_a_serving_pair_that_clients_can_verify(
    tmp_path: Path, start_webhook: Callable[..., RunningWebhook]
) -> None:
    files = self_signed(tmp_path / "generated", dns_names=["policy-webhook.infra.svc"])
    assert files.ca_file is not None
    assert [p.name for p in (files.ca_file, files.cert_file, files.key_file)] == [
        "ca.crt",
        "tls.crt",
        "tls.key",
    ]
    assert stat.S_IMODE(files.key_file.stat().st_mode) == 0o600

    sans = x509.load_pem_x509_certificate(
        files.cert_file.read_bytes()
    ).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert set(sans.value.get_values_for_type(x509.DNSName)) == {
        "localhost",
        "policy-webhook.infra.svc",
    }
    assert {str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)} == {
        "127.0.0.1",
        "::1",
    }

    trusting = ssl.create_default_context(cafile=str(files.ca_file))
    with start_webhook(tls=ReloadingTLS(files.cert_file, files.key_file, poll_interval=0)) as hook:
        for host in ("127.0.0.1", "localhost"):
            conn = http.client.HTTPSConnection(host, hook.port, context=trusting, timeout=10)
            conn.request("GET", "/healthz")
            assert conn.getresponse().status == 200
            conn.close()
