"""components/cert-renewal's Job, run as its own ServiceAccount against a real API server.

What the CronJob's pod runs — `certs/renew_in_cluster.py` with the pod's token — run here with
a real token of `policy-webhook-certs` and the component's RBAC, against the webhook
configurations named as shipped (made inert: an objectSelector that matches nothing, so they
never intercept other tests' requests):

- the first run makes the CA (kept in the Secret policy-webhook-ca), the serving Secret and
  every webhook's caBundle; a second run writes nothing;
- a serving certificate within the renewal window is reissued by the same CA, the caBundle
  unchanged;
- a CA rotation (its key removed from the state Secret) trusts the old and the new CA in
  caBundle, before the serving Secret carries a certificate of the new one.
"""

from __future__ import annotations

import base64
import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cryptography import x509
from identities import apply_rbac, service_account_token
from webhook_harness import REPO

from tests.deploy import kustomizations as k

if TYPE_CHECKING:
    from cluster import LocalCluster

NAMESPACE = "policy-webhook"
RENEW = REPO / "certs" / "renew_in_cluster.py"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
INERT = {"matchLabels": {"policy-attachment.dev/e2e-cert-renewal-never": "true"}}


class Job:
    """The CronJob's command, with the token and API server of this cluster."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.token = workdir / "token"
        self.token.write_text(service_account_token(cluster, NAMESPACE, "policy-webhook-certs"))
        self.ca = workdir / "apiserver-ca.crt"
        self.ca.write_text(cluster.ca_pem)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        # The CronJob's own arguments, then this test's.
        cron = k.only(k.render("self-managed", ["cert-renewal"]), "CronJob")
        (container,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
        shipped = [a.replace("$(POD_NAMESPACE)", NAMESPACE) for a in container["args"]]
        done = subprocess.run(
            [sys.executable, str(RENEW), *shipped, "--server", self.cluster.server,
             "--token-file", str(self.token), "--ca-file", str(self.ca), *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done


def secret(cluster: LocalCluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get_json("secret", name, "-n", NAMESPACE)
    return found


def data(cluster: LocalCluster, name: str) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in secret(cluster, name)["data"].items()}


def ca_bundles(cluster: LocalCluster) -> dict[str, bytes]:
    found = {}
    for kind in WEBHOOK_KINDS:
        for hook in cluster.get_json(kind.lower(), "policy-webhook")["webhooks"]:
            found[hook["name"]] = base64.b64decode(hook["clientConfig"].get("caBundle") or "")
    return found


def serving_cert(cluster: LocalCluster) -> x509.Certificate:
    return x509.load_pem_x509_certificate(data(cluster, "policy-webhook-tls")["tls.crt"])


@pytest.fixture(scope="module")
def job(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    docs = k.render("self-managed", ["cert-renewal"])
    apply_rbac(cluster, docs)
    for name in ("policy-webhook-tls", "policy-webhook-ca"):
        cluster.kubectl("delete", "secret", name, "-n", NAMESPACE, "--ignore-not-found")
    configs = []
    for doc in docs:
        if doc["kind"] in WEBHOOK_KINDS:
            doc = copy.deepcopy(doc)
            for hook in doc["webhooks"]:
                hook["objectSelector"] = INERT
            configs.append(doc)
    cluster.apply(configs)
    try:
        yield Job(cluster, tmp_path_factory.mktemp("certs"))
    finally:
        for kind in WEBHOOK_KINDS:
            cluster.kubectl(
                "delete", kind.lower(), "policy-webhook", "--ignore-not-found", check=False
            )
        for name in ("policy-webhook-tls", "policy-webhook-ca"):
            cluster.kubectl(
                "delete", "secret", name, "-n", NAMESPACE, "--ignore-not-found", check=False
            )


@pytest.fixture(scope="module")
def first_run(cluster: LocalCluster, job: Job) -> str:
    return job.run().stderr


def test_the_first_run_makes_the_ca_the_serving_secret_and_every_ca_bundle(
    cluster: LocalCluster, first_run: str
) -> None:
    served = secret(cluster, "policy-webhook-tls")
    assert served["type"] == "kubernetes.io/tls"
    state = data(cluster, "policy-webhook-ca")
    assert set(state) == {"ca.crt", "ca.key"}
    ca = x509.load_pem_x509_certificate(state["ca.crt"])
    cert = serving_cert(cluster)
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "policy-webhook.policy-webhook.svc" in names.get_values_for_type(x509.DNSName)
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert 89 <= days <= 90  # the CronJob's --days
    bundles = ca_bundles(cluster)
    assert len(bundles) == 4
    assert set(bundles.values()) == {data(cluster, "policy-webhook-tls")["ca.crt"]}
    assert x509.load_pem_x509_certificates(next(iter(bundles.values()))) == [ca]
    print(f"\n[e2e] first run: {first_run.strip().splitlines()[-1]}")


def test_a_run_that_is_not_due_writes_nothing(
    cluster: LocalCluster, first_run: str, job: Job
) -> None:
    before = {
        name: secret(cluster, name)["metadata"]["resourceVersion"]
        for name in ("policy-webhook-tls", "policy-webhook-ca")
    }
    configs = {
        kind: cluster.get_json(kind.lower(), "policy-webhook")["metadata"]["resourceVersion"]
        for kind in WEBHOOK_KINDS
    }
    said = job.run().stderr
    assert "serving certificate: kept" in said
    assert said.count("unchanged") == 4  # two Secrets, two configurations
    assert {n: secret(cluster, n)["metadata"]["resourceVersion"] for n in before} == before
    assert {
        kind: cluster.get_json(kind.lower(), "policy-webhook")["metadata"]["resourceVersion"]
        for kind in WEBHOOK_KINDS
    } == configs


def test_a_certificate_within_the_window_is_reissued_by_the_same_ca(
    cluster: LocalCluster, first_run: str, job: Job
) -> None:
    old = serving_cert(cluster)
    bundles = ca_bundles(cluster)
    said = job.run("--renew-before", "91").stderr  # the 90-day certificate is now due
    new = serving_cert(cluster)
    assert "reissued" in said
    assert new.serial_number != old.serial_number
    new.verify_directly_issued_by(
        x509.load_pem_x509_certificate(data(cluster, "policy-webhook-ca")["ca.crt"])
    )
    assert ca_bundles(cluster) == bundles  # same CA: nothing to trust anew


def test_a_ca_rotation_trusts_both_cas_and_serves_a_certificate_of_the_new_one(
    cluster: LocalCluster, first_run: str, job: Job
) -> None:
    old_ca = x509.load_pem_x509_certificate(data(cluster, "policy-webhook-ca")["ca.crt"])
    # What docs/install.md says to do after a leak: remove the key, run the Job.
    cluster.kubectl(
        "patch", "secret", "policy-webhook-ca", "-n", NAMESPACE, "--type=json",
        "-p", '[{"op":"remove","path":"/data/ca.key"}]',
    )  # fmt: skip
    job.run()
    state = data(cluster, "policy-webhook-ca")
    new_ca = x509.load_pem_x509_certificate(state["ca.crt"])
    assert new_ca != old_ca
    assert x509.load_pem_x509_certificates(state["ca-previous.crt"]) == [old_ca]
    for bundle in ca_bundles(cluster).values():
        assert x509.load_pem_x509_certificates(bundle) == [new_ca, old_ca]
    serving_cert(cluster).verify_directly_issued_by(new_ca)
    assert data(cluster, "policy-webhook-tls")["ca.crt"] == next(iter(ca_bundles(cluster).values()))
