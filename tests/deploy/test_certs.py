"""certs/generate.py: a CA and a serving certificate the API server will trust, and renewals.

Runs the script as an operator would (a subprocess, files in a temp folder) and checks its
output with `cryptography` and with a real TLS handshake in memory — no network.
"""

from __future__ import annotations

import datetime
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.fixtures.paths import REPO

GENERATE = REPO / "certs" / "generate.py"
SERVICE_NAMES = [
    "policy-webhook.policy-webhook.svc",
    "policy-webhook.policy-webhook.svc.cluster.local",
]


def generate(out: Path, *args: str) -> str:
    """Run generate.py for policy-webhook/policy-webhook into `out`; return what it said."""
    result = subprocess.run(
        [
            sys.executable,
            str(GENERATE),
            "--service",
            "policy-webhook",
            "--namespace",
            "policy-webhook",
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stderr


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def bundle(out: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates((out / "ca-bundle.crt").read_bytes())


def sans(certificate: x509.Certificate) -> tuple[list[str], list[str]]:
    value = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return value.get_values_for_type(x509.DNSName), [
        str(ip) for ip in value.get_values_for_type(x509.IPAddress)
    ]


def handshake(out: Path, server_hostname: str, cafile: Path | None = None) -> None:
    """A TLS handshake in memory: server with tls.crt/tls.key, client trusting only `cafile`.

    The client checks the chain and the host name the way the API server's client does.
    """
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(out / "tls.crt", out / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(cafile or out / "ca-bundle.crt"))
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(client_in, client_out, server_hostname=server_hostname)
    server = server_ctx.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(client_out.read())
        client_in.write(server_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


@pytest.fixture(scope="module")
def issued(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("certs") / "out"
    generate(out)
    return out


def test_it_writes_the_ca_the_serving_pair_and_the_bundle(issued: Path) -> None:
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"):
        assert (issued / name).stat().st_size > 0, name


def test_private_keys_are_readable_by_their_owner_only(issued: Path) -> None:
    assert (issued / "ca.key").stat().st_mode & 0o777 == 0o600
    assert (issued / "tls.key").stat().st_mode & 0o777 == 0o600
    assert issued.stat().st_mode & 0o777 == 0o700


def test_serving_certificate_is_signed_by_the_ca(issued: Path) -> None:
    cert(issued / "tls.crt").verify_directly_issued_by(cert(issued / "ca.crt"))


def test_the_bundle_is_the_ca_on_a_first_run(issued: Path) -> None:
    assert bundle(issued) == [cert(issued / "ca.crt")]


def test_serving_certificate_names_are_the_service_dns_names(issued: Path) -> None:
    assert sans(cert(issued / "tls.crt")) == (SERVICE_NAMES, [])


@pytest.mark.parametrize("hostname", SERVICE_NAMES)
def test_a_client_trusting_the_bundle_accepts_the_service_name(issued: Path, hostname: str) -> None:
    handshake(issued, hostname)


def test_a_client_rejects_any_other_name(issued: Path) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="match"):
        handshake(issued, "policy-webhook.other-namespace.svc")


def test_a_client_trusting_another_ca_rejects_it(issued: Path, tmp_path: Path) -> None:
    generate(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(issued, SERVICE_NAMES[0], cafile=tmp_path / "other" / "ca.crt")


def test_key_matches_the_certificate(issued: Path) -> None:
    key = serialization.load_pem_private_key((issued / "tls.key").read_bytes(), password=None)
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert key.public_key().public_bytes(*spki) == cert(
        issued / "tls.crt"
    ).public_key().public_bytes(*spki)


def test_the_ca_is_a_ca_and_the_serving_certificate_is_a_server_leaf(issued: Path) -> None:
    ca, leaf = cert(issued / "ca.crt"), cert(issued / "tls.crt")
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_days_sets_the_serving_validity(tmp_path: Path) -> None:
    generate(tmp_path, "--days", "10")
    leaf = cert(tmp_path / "tls.crt")
    lifetime = leaf.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    assert datetime.timedelta(days=9) < lifetime <= datetime.timedelta(days=10)


def test_the_serving_certificate_never_outlives_its_ca(tmp_path: Path) -> None:
    generate(tmp_path, "--ca-days", "5", "--days", "365")
    assert (
        cert(tmp_path / "tls.crt").not_valid_after_utc
        <= cert(tmp_path / "ca.crt").not_valid_after_utc
    )


def test_extra_sans_and_ips_are_added_after_the_service_names(tmp_path: Path) -> None:
    generate(tmp_path, "--san", "webhook.example.test", "--san", "127.0.0.1", "--ip", "::1")
    assert sans(cert(tmp_path / "tls.crt")) == (
        [*SERVICE_NAMES, "webhook.example.test"],
        ["127.0.0.1", "::1"],
    )
    handshake(tmp_path, "webhook.example.test")


def test_renew_before_keeps_ca_and_certificate_when_not_due(tmp_path: Path) -> None:
    generate(tmp_path, "--days", "365")
    before = {
        name: (tmp_path / name).read_bytes() for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")
    }
    said = generate(tmp_path, "--renew-before", "30")
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert "CA: reused" in said
    assert "serving certificate: kept" in said


def test_renew_before_reissues_the_serving_certificate_when_due_and_keeps_the_ca(
    tmp_path: Path,
) -> None:
    generate(tmp_path, "--days", "10")
    ca_before, leaf_before = (tmp_path / "ca.crt").read_bytes(), cert(tmp_path / "tls.crt")
    said = generate(tmp_path, "--renew-before", "30", "--days", "365")
    assert (tmp_path / "ca.crt").read_bytes() == ca_before
    leaf = cert(tmp_path / "tls.crt")
    assert leaf.serial_number != leaf_before.serial_number
    assert leaf.not_valid_after_utc > leaf_before.not_valid_after_utc
    leaf.verify_directly_issued_by(cert(tmp_path / "ca.crt"))
    assert "within the renewal window" in said
    assert len(bundle(tmp_path)) == 1
    handshake(tmp_path, SERVICE_NAMES[0])


def test_renew_before_reissues_when_the_names_change(tmp_path: Path) -> None:
    generate(tmp_path)
    said = generate(tmp_path, "--renew-before", "30", "--san", "webhook.example.test")
    assert "names changed" in said
    assert "webhook.example.test" in sans(cert(tmp_path / "tls.crt"))[0]


def test_renew_before_reissues_a_certificate_whose_key_is_missing(tmp_path: Path) -> None:
    generate(tmp_path)
    (tmp_path / "tls.key").unlink()
    said = generate(tmp_path, "--renew-before", "30")
    assert "serving certificate: reissued" in said
    handshake(tmp_path, SERVICE_NAMES[0])


def test_without_renew_before_a_new_ca_is_made_and_the_old_one_stays_trusted(
    tmp_path: Path,
) -> None:
    generate(tmp_path)
    old_ca = cert(tmp_path / "ca.crt")
    generate(tmp_path)
    new_ca = cert(tmp_path / "ca.crt")
    assert new_ca != old_ca
    assert bundle(tmp_path) == [new_ca, old_ca]  # current first, previous kept for the overlap
    cert(tmp_path / "tls.crt").verify_directly_issued_by(new_ca)


def test_renew_before_replaces_a_ca_that_expires_within_the_window(tmp_path: Path) -> None:
    generate(tmp_path, "--ca-days", "20")
    old_ca = cert(tmp_path / "ca.crt")
    said = generate(tmp_path, "--renew-before", "30")
    new_ca = cert(tmp_path / "ca.crt")
    assert new_ca != old_ca
    assert "expires within the renewal window" in said
    assert bundle(tmp_path) == [new_ca, old_ca]
    cert(tmp_path / "tls.crt").verify_directly_issued_by(new_ca)


def test_drop_previous_ca_ends_the_overlap(tmp_path: Path) -> None:
    generate(tmp_path)
    generate(tmp_path)
    said = generate(tmp_path, "--renew-before", "30", "--drop-previous-ca")
    assert bundle(tmp_path) == [cert(tmp_path / "ca.crt")]
    assert "previous CA dropped" in said
    assert not (tmp_path / "ca-previous.crt").exists()


def test_ca_bundle_extra_adds_another_ca_once(tmp_path: Path) -> None:
    generate(tmp_path / "other")
    other = tmp_path / "other" / "ca.crt"
    out = tmp_path / "out"
    generate(out, "--ca-bundle-extra", str(other), "--ca-bundle-extra", str(other))
    assert bundle(out) == [cert(out / "ca.crt"), cert(other)]


@pytest.mark.parametrize("args", [["--days", "0"], ["--renew-before", "-1"], ["--ip", "nope"]])
def test_bad_arguments_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(GENERATE),
            "--service",
            "s",
            "--namespace",
            "n",
            "--out",
            str(tmp_path),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
