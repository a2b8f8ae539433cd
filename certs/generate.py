#!/usr/bin/env python3
"""Make the webhook's private CA and serving certificate: ca.crt, ca.key, tls.crt, tls.key.

The API server calls the webhook at https://<service>.<namespace>.svc and checks the
certificate against the webhook configurations' caBundle, so the serving certificate carries
that name (and the .svc.<cluster-domain> form); ca-bundle.crt is what goes into caBundle.

Run again with `--renew-before DAYS` to keep the CA and reissue the serving certificate only
when it expires within DAYS (or no longer fits: other names, other CA, missing key). Without
`--renew-before` a new CA is made; the previous one stays in ca-bundle.crt (as ca-previous.crt)
so that pods still serving the old certificate keep being trusted until `--drop-previous-ca`.
Needs only `cryptography` besides the standard library; touches nothing outside `--out`.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY, CA_PREVIOUS = "ca.crt", "ca.key", "ca-previous.crt"
TLS_CERT, TLS_KEY, CA_BUNDLE = "tls.crt", "tls.key", "ca-bundle.crt"
# Certificates start a little in the past: a node whose clock lags must not see "not yet valid".
BACKDATE = datetime.timedelta(minutes=5)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True, slots=True)
class Pair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    now = datetime.datetime.now(datetime.UTC)
    out: Path = args.out
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    dns_names, ips = subject_alt_names(args)
    window = datetime.timedelta(days=args.renew_before) if args.renew_before is not None else None

    old_ca = read_pair(out / CA_CERT, out / CA_KEY)
    ca, ca_reason = choose_ca(old_ca, out, now=now, window=window)
    if ca is None:
        ca = issue_ca(now=now, days=args.ca_days, name=f"{args.service}-ca")
        if (out / CA_CERT).exists():  # keep the CA being replaced trusted during the overlap
            write_atomic(out / CA_PREVIOUS, (out / CA_CERT).read_bytes(), mode=0o644)
        write_atomic(out / CA_KEY, key_pem(ca.key), mode=0o600)
        write_atomic(out / CA_CERT, cert_pem(ca.cert), mode=0o644)
    say(f"CA: {ca_reason}; valid until {ca.cert.not_valid_after_utc:%Y-%m-%d}")

    serving = read_pair(out / TLS_CERT, out / TLS_KEY)
    reason = serving_reissue_reason(serving, ca.cert, dns_names, ips, now=now, window=window)
    if reason is None:
        assert serving is not None
        say(
            f"serving certificate: kept, valid until {serving.cert.not_valid_after_utc:%Y-%m-%d}, "
            f"outside the {args.renew_before}-day renewal window"
        )
    else:
        serving = issue_serving(ca, dns_names, ips, now=now, days=args.days)
        # Key first: a reader that sees the new certificate must never pair it with the old key.
        write_atomic(out / TLS_KEY, key_pem(serving.key), mode=0o600)
        write_atomic(out / TLS_CERT, cert_pem(serving.cert), mode=0o644)
        say(
            f"serving certificate: reissued ({reason}), valid until "
            f"{serving.cert.not_valid_after_utc:%Y-%m-%d}, for {', '.join(dns_names + [str(i) for i in ips])}"
        )

    if args.drop_previous_ca and (out / CA_PREVIOUS).exists():
        (out / CA_PREVIOUS).unlink()
        say("previous CA dropped from the bundle")
    bundle = build_bundle(ca.cert, out / CA_PREVIOUS, args.ca_bundle_extra, now=now)
    write_atomic(out / CA_BUNDLE, b"".join(cert_pem(c) for c in bundle), mode=0o644)
    say(f"ca bundle: {len(bundle)} CA certificate(s) in {out / CA_BUNDLE}")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Generate or renew the webhook's CA and serving certificate."
    )
    parser.add_argument("--service", required=True, help="Service name, e.g. policy-webhook")
    parser.add_argument("--namespace", required=True, help="its namespace, e.g. policy-webhook")
    parser.add_argument("--out", required=True, type=Path, help="folder for the files (made 0700)")
    parser.add_argument(
        "--days",
        type=positive,
        default=365,
        help="validity of the serving certificate (default 365)",
    )
    parser.add_argument(
        "--ca-days", type=positive, default=3650, help="validity of a new CA (default 3650)"
    )
    parser.add_argument(
        "--cluster-domain",
        default="cluster.local",
        help="for the <svc>.<ns>.svc.<domain> name (default cluster.local)",
    )
    parser.add_argument(
        "--san",
        action="append",
        default=[],
        metavar="NAME_OR_IP",
        help="an extra subject alternative name, DNS or IP (repeatable)",
    )
    parser.add_argument(
        "--ip",
        action="append",
        default=[],
        type=ipaddress.ip_address,
        help="an extra IP address SAN (repeatable)",
    )
    parser.add_argument(
        "--renew-before",
        type=non_negative,
        metavar="DAYS",
        help="keep the CA (unless it expires within DAYS) and reissue the serving "
        "certificate only when it expires within DAYS or no longer fits",
    )
    parser.add_argument(
        "--ca-bundle-extra",
        action="append",
        default=[],
        type=Path,
        metavar="PEM",
        help="more CA certificates to trust in ca-bundle.crt, e.g. "
        "a CA being migrated from (repeatable)",
    )
    parser.add_argument(
        "--drop-previous-ca",
        action="store_true",
        help="end a CA rotation: remove the previous CA from ca-bundle.crt",
    )
    return parser.parse_args(argv)


def positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of days")
    return value


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be zero or more days")
    return value


def subject_alt_names(args: argparse.Namespace) -> tuple[list[str], list[IPAddress]]:
    """The Service's two DNS names first, then the extras, without duplicates."""
    base = f"{args.service}.{args.namespace}.svc"
    dns: list[str] = [base, f"{base}.{args.cluster_domain}"]
    ips: list[IPAddress] = []
    for extra in args.san:
        try:
            ips.append(ipaddress.ip_address(extra))
        except ValueError:
            dns.append(extra)
    ips.extend(args.ip)
    return list(dict.fromkeys(dns)), list(dict.fromkeys(ips))


def choose_ca(
    old: Pair | None, out: Path, *, now: datetime.datetime, window: datetime.timedelta | None
) -> tuple[Pair | None, str]:
    """The CA to sign with and why; None means "make a new one"."""
    if window is None:
        return None, "generated (no --renew-before: a new CA each run)"
    if old is None:
        if (out / CA_CERT).exists():
            return None, f"generated ({CA_CERT} without a matching {CA_KEY} cannot sign)"
        return None, "generated (none yet)"
    if old.cert.not_valid_after_utc - now <= window:
        return (
            None,
            "generated (the old one expires within the renewal window; it stays in the bundle)",
        )
    return old, "reused"


def serving_reissue_reason(
    serving: Pair | None,
    ca: x509.Certificate,
    dns: Sequence[str],
    ips: Sequence[IPAddress],
    *,
    now: datetime.datetime,
    window: datetime.timedelta | None,
) -> str | None:
    """Why the serving certificate must be issued anew, or None to keep it."""
    if window is None:
        return "no --renew-before"
    if serving is None:
        return "none yet"
    try:
        serving.cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "not signed by the current CA"
    try:
        san = serving.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "it has no subject alternative names"
    if set(san.get_values_for_type(x509.DNSName)) != set(dns) or set(
        san.get_values_for_type(x509.IPAddress)
    ) != set(ips):
        return "the requested names changed"
    if serving.cert.not_valid_after_utc - now <= window:
        return f"it expires {serving.cert.not_valid_after_utc:%Y-%m-%d}, within the renewal window"
    return None


def issue_ca(*, now: datetime.datetime, days: int, name: str) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    # A timestamp in the name tells an old CA from its successor in a bundle.
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{int(now.timestamp())}")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
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
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return Pair(cert, key)


def issue_serving(
    ca: Pair, dns: Sequence[str], ips: Sequence[IPAddress], *, now: datetime.datetime, days: int
) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    # Never outlive the CA: a chain is only as valid as its shortest link.
    not_after = min(now + datetime.timedelta(days=days), ca.cert.not_valid_after_utc)
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(i) for i in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Pair(cert, key)


def build_bundle(
    current: x509.Certificate, previous: Path, extras: Sequence[Path], *, now: datetime.datetime
) -> list[x509.Certificate]:
    """Current CA first, then the previous one and the extras; expired ones and repeats left out."""
    found = [current]
    sources = [previous, *extras] if previous.exists() else list(extras)
    for path in sources:
        try:
            found += x509.load_pem_x509_certificates(path.read_bytes())
        except (OSError, ValueError) as exc:
            sys.exit(f"generate.py: cannot read CA certificates from {path}: {exc}")
    bundle: dict[bytes, x509.Certificate] = {}
    for cert in found:
        if cert.not_valid_after_utc > now:
            bundle.setdefault(cert.fingerprint(hashes.SHA256()), cert)
    return list(bundle.values())


def read_pair(cert_path: Path, key_path: Path) -> Pair | None:
    """The certificate and key at these paths, or None when either is missing or they differ."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or _spki(key.public_key()) != _spki(
        cert.public_key()
    ):
        return None
    return Pair(cert, key)


def _spki(public_key: PublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Write beside the target and rename over it: a reader sees the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def say(message: str) -> None:
    print(f"generate.py: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
