"""A real, throw-away Kubernetes control plane on loopback: etcd + kube-apiserver v1.20.2 + kubectl.

The end-to-end suite drives the webhook the way a cluster does (the API server calls it over
HTTPS, with real TLS and RBAC), in the spirit of controller-runtime's envtest. This module only
runs processes and talks to them through kubectl; it knows nothing about the webhook.
Binaries come from `provision.py`; processes are started and stopped by their own PIDs.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import provision  # a sibling: conftest.py puts tests/e2e on sys.path, as pytest's rootdir mode does
import trustme
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO_ROOT = Path(__file__).resolve().parents[2]
GATEWAY_API_VERSION = "v1.6.1"
# The project's own Gateway API CRDs, for a checkout without the upstream ones beside it.
FALLBACK_CRD_DIR = Path(__file__).resolve().parent / "crds" / "gateway-api"
# The suite's channel: ListenerSet and the x-k8s.io policy kinds are in it.
SUITE_CHANNEL = "experimental"
# auto (default): upstream when found, else the fallback; upstream or fallback: that one only.
CRD_CHOICE_ENV = "E2E_GATEWAY_API_CRDS"
CRD_CHOICES = ("auto", "upstream", "fallback")
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


class ClusterError(RuntimeError):
    """The control plane did not come up, or a process died; the message says where its log is."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl call failed; unlike its base class, str() includes kubectl's stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {self.stderr}"


@dataclass(frozen=True, slots=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int


@dataclass(frozen=True, slots=True)
class GatewayApiCrds:
    """Which Gateway API CRDs a cluster gets, and why: the session header says it in one line."""

    directory: Path  # the folder the CRD files are read from
    upstream: bool
    channel: str
    reason: str = ""  # why the fallback, when it is the fallback

    def describe(self) -> str:
        if self.upstream:
            return f"upstream {GATEWAY_API_VERSION} {self.channel} from {self.directory}"
        return f"the project's own fallback CRDs ({self.reason})"


def gateway_api_dir() -> Path:
    """GATEWAY_API_DIR, else the upstream CRDs kept beside the repo in ../shared."""
    configured = os.environ.get("GATEWAY_API_DIR")
    if configured:
        return Path(configured).expanduser().resolve()
    return REPO_ROOT.parent / "shared" / "gateway-api" / GATEWAY_API_VERSION


def choose_gateway_api_crds(channel: str, source_dir: Path | None = None) -> GatewayApiCrds:
    """Upstream's channel when it is there, else the project's fallback (E2E_GATEWAY_API_CRDS).

    A fresh clone has no ../shared; its suite must still run, so `auto` falls back to the CRDs
    kept under tests/e2e/crds. `upstream` refuses to fall back (for a run that must prove the
    upstream CRDs), `fallback` never looks for them. The fallback stands for the experimental
    channel, whichever channel is asked for: the suite installs no other.
    """
    choice = os.environ.get(CRD_CHOICE_ENV, "").strip().lower() or "auto"
    if choice not in CRD_CHOICES:
        raise ClusterError(f"{CRD_CHOICE_ENV}={choice!r}: expected one of {', '.join(CRD_CHOICES)}")
    if choice == "fallback":
        return GatewayApiCrds(FALLBACK_CRD_DIR, False, channel, f"{CRD_CHOICE_ENV}=fallback")
    directory = (source_dir or gateway_api_dir()) / channel
    if directory.is_dir():
        return GatewayApiCrds(directory, True, channel)
    if choice == "upstream":
        raise ClusterError(
            f"no Gateway API channel at {directory} ({CRD_CHOICE_ENV}=upstream): set "
            f"GATEWAY_API_DIR, or unset {CRD_CHOICE_ENV} to let the fallback CRDs stand in"
        )
    return GatewayApiCrds(FALLBACK_CRD_DIR, False, channel, f"upstream not found at {directory}")


def find_kubectl() -> str:
    """E2E_KUBECTL, else `kubectl` on PATH."""
    found = os.environ.get("E2E_KUBECTL") or shutil.which("kubectl")
    if not found:
        raise ClusterError("kubectl not found: put it on PATH or set E2E_KUBECTL")
    return found


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalCluster:
    """etcd + kube-apiserver on 127.0.0.1 with real TLS, RBAC and an admin kubeconfig.

    `start()` brings both up and waits for /readyz; `stop()` ends them by PID and keeps the data
    dir, so a later `start()` or `restart_apiserver()` sees the same objects. `cleanup()` removes
    the working directory (certs, data, logs). `apiserver_args` are added to kube-apiserver's
    own (e.g. an audit policy and log, for a test that needs one; the session's cluster has none).
    """

    def __init__(
        self,
        binaries: provision.Binaries,
        *,
        workdir: Path | None = None,
        kubectl_path: str | None = None,
        apiserver_args: Sequence[str] = (),
    ) -> None:
        self.binaries = binaries
        self.apiserver_args = tuple(apiserver_args)
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="policy-webhook-e2e-"))
        self.log_dir = self.workdir / "logs"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.kubectl_path = kubectl_path or find_kubectl()
        self.ports = Ports(free_loopback_port(), free_loopback_port(), free_loopback_port())
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"
        self._pki = self.workdir / "pki"
        self._server_ca = trustme.CA()
        self._client_ca = trustme.CA()
        self.ca_pem: str = self._server_ca.cert_pem.bytes().decode()
        self._etcd: subprocess.Popen[bytes] | None = None
        self._apiserver: subprocess.Popen[bytes] | None = None
        self._prepared = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start etcd, then the API server, and wait until /readyz says ok. Idempotent."""
        if not self._prepared:
            self._prepare()
        if not self._alive(self._etcd):
            self._etcd = self._spawn("etcd", self._etcd_command())
            self._wait_for_etcd()
        if not self._alive(self._apiserver):
            self._start_apiserver()

    def stop(self) -> None:
        """Stop the API server, then etcd, each by its PID. Data and logs stay."""
        _terminate(self._apiserver)
        _terminate(self._etcd)
        self._apiserver = self._etcd = None

    def restart_apiserver(self) -> float:
        """Stop and start kube-apiserver on the same port and etcd; return seconds to ready."""
        _terminate(self._apiserver)
        return self._start_apiserver()

    def stop_apiserver(self) -> None:
        """Stop only kube-apiserver (by PID), keeping etcd and the data: an API outage."""
        _terminate(self._apiserver)

    def start_apiserver(self) -> float:
        """Start kube-apiserver again after `stop_apiserver`; return seconds to ready."""
        return self._start_apiserver()

    def cleanup(self) -> None:
        """Stop everything and delete the working directory."""
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def pids(self) -> dict[str, int]:
        """PIDs of the running processes, by name."""
        running = {"etcd": self._etcd, "kube-apiserver": self._apiserver}
        return {name: p.pid for name, p in running.items() if p is not None and p.poll() is None}

    # ------------------------------------------------------------------ kubectl

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
        kubeconfig: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against this cluster (as admin unless `kubeconfig` is given)."""
        command = [
            self.kubectl_path,
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, command, result.stdout, result.stderr)
        return result

    def apply(
        self, manifest: str | Mapping[str, Any] | Sequence[Mapping[str, Any]], *args: str
    ) -> subprocess.CompletedProcess[str]:
        """`kubectl apply -f -` of YAML text, one object, or a list of objects."""
        text = manifest if isinstance(manifest, str) else _to_yaml(manifest)
        return self.kubectl("apply", "-f", "-", *args, input=text)

    def get_json(self, *args: str) -> Any:
        """`kubectl get ... -o json`, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def create_user(self, name: str, groups: Sequence[str] = ()) -> Path:
        """Write a kubeconfig for a client-certificate user (CN=name, one O per group)."""
        cert_pem, key_pem = self._issue_client_cert(name, groups)
        path = self.workdir / f"user-{name.replace(':', '_')}.kubeconfig"
        path.write_text(self._kubeconfig_text(name, cert_pem, key_pem))
        return path

    # ------------------------------------------------------------------ Gateway API CRDs

    def install_gateway_api_crds(
        self, channel: str = "standard", source_dir: Path | None = None
    ) -> GatewayApiCrds:
        """Install the Gateway API CRDs (upstream's, edited for v1.20, or the project's fallback);
        wait until Established, and say which were installed."""
        chosen = choose_gateway_api_crds(channel, source_dir)
        crds = load_gateway_api_crds(chosen)
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            input=_to_yaml(crds),
            timeout=120,
        )
        names = [crd["metadata"]["name"] for crd in crds]
        self.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            *(f"crd/{name}" for name in names),
            timeout=90,
        )
        return chosen

    # ------------------------------------------------------------------ logs

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.log_path(name)
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ internals

    def _prepare(self) -> None:
        for directory in (self._pki, self.log_dir, self.workdir / "etcd-data"):
            directory.mkdir(parents=True, exist_ok=True)
        self._write_pki()
        cert_pem, key_pem = self._issue_client_cert("admin", ["system:masters"])
        self.kubeconfig.write_text(self._kubeconfig_text("admin", cert_pem, key_pem))
        self._prepared = True

    def _write_pki(self) -> None:
        serving = self._server_ca.issue_cert("127.0.0.1", "localhost", common_name="kube-apiserver")
        serving.cert_chain_pems[0].write_to_path(str(self._pki / "serving.crt"))
        serving.private_key_pem.write_to_path(str(self._pki / "serving.key"))
        self._client_ca.cert_pem.write_to_path(str(self._pki / "client-ca.crt"))
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (self._pki / "sa.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (self._pki / "sa.pub").write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _issue_client_cert(self, user: str, groups: Sequence[str]) -> tuple[bytes, bytes]:
        """The API server reads the user from CN and the groups from every O of the subject."""
        ca_key = serialization.load_pem_private_key(self._client_ca.private_key_pem.bytes(), None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise ClusterError(f"unexpected client CA key type {type(ca_key).__name__}")
        ca_cert = x509.load_pem_x509_certificate(self._client_ca.cert_pem.bytes())
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [x509.NameAttribute(NameOID.ORGANIZATION_NAME, group) for group in groups]
            + [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        )
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem

    def _kubeconfig_text(self, user: str, cert_pem: bytes, key_pem: bytes) -> str:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "e2e",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(self.ca_pem.encode()),
                    },
                }
            ],
            "users": [
                {
                    "name": user,
                    "user": {
                        "client-certificate-data": b64(cert_pem),
                        "client-key-data": b64(key_pem),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
        }
        return yaml.safe_dump(config, sort_keys=False)

    def _etcd_command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        return [
            str(self.binaries.etcd),
            "--name=e2e",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}",
            # A test cluster needs no durability across power loss; this makes writes cheap.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_command(self) -> list[str]:
        pki = self._pki
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.apiserver}",
            "--insecure-port=0",  # v1.20 still opens an unauthenticated port 8080 by default
            "--advertise-address=127.0.0.1",
            # The kubernetes Service's Endpoints may not hold a loopback IP: skip reconciling it.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--client-ca-file={pki / 'client-ca.crt'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # No controller-manager creates the `default` ServiceAccount, so Pods would be refused.
            "--disable-admission-plugins=ServiceAccount",
            "--profiling=false",
            *self.apiserver_args,
        ]

    def _start_apiserver(self) -> float:
        started = time.monotonic()
        self._apiserver = self._spawn("kube-apiserver", self._apiserver_command())
        self._wait_until(self._apiserver_ready, "kube-apiserver", self._apiserver)
        return time.monotonic() - started

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with self.log_path(name).open("ab") as log:
            stamp = time.strftime("%H:%M:%S")
            log.write(f"\n===== {stamp} starting: {' '.join(command)}\n".encode())
            log.flush()
            return subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def _wait_for_etcd(self) -> None:
        url = f"http://127.0.0.1:{self.ports.etcd_client}/health"
        self._wait_until(lambda: _http_get(url).find('"health":"true"') >= 0, "etcd", self._etcd)

    def _apiserver_ready(self) -> bool:
        result = self.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
        return result.returncode == 0 and result.stdout.strip() == "ok"

    def _wait_until(
        self, ready: Callable[[], bool], name: str, proc: subprocess.Popen[bytes] | None
    ) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self._alive(proc):
                raise ClusterError(
                    f"{name} exited; log {self.log_path(name)}:\n{self.log_tail(name)}"
                )
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                if ready():
                    return
            time.sleep(0.25)
        raise ClusterError(
            f"{name} not ready after {READY_TIMEOUT_S}s; log {self.log_path(name)}:"
            f"\n{self.log_tail(name)}"
        )

    @staticmethod
    def _alive(proc: subprocess.Popen[bytes] | None) -> bool:
        return proc is not None and proc.poll() is None


# ---------------------------------------------------------------------- Gateway API CRDs


def load_gateway_api_crds(chosen: GatewayApiCrds) -> list[dict[str, Any]]:
    """The chosen CRDs: upstream's channel (kustomization order) adapted to what
    kube-apiserver v1.20 accepts, or the fallback's files as written (they need no edit)."""
    if not chosen.directory.is_dir():
        raise ClusterError(f"no Gateway API CRDs at {chosen.directory} (set GATEWAY_API_DIR)")
    crds: list[dict[str, Any]] = []
    for path in _channel_files(chosen.directory):
        for doc in yaml.safe_load_all(path.read_text()):
            # Only CRDs: the bundle's ValidatingAdmissionPolicy (safe-upgrades) is GA in 1.30.
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                crds.append(adapt_crd_for_v1_20(doc) if chosen.upstream else doc)
    if not crds:
        raise ClusterError(f"no CustomResourceDefinition in {chosen.directory}")
    return crds


def _channel_files(directory: Path) -> list[Path]:
    kustomization = directory / "kustomization.yaml"
    if kustomization.is_file():
        names = yaml.safe_load(kustomization.read_text()).get("resources", [])
        paths = [directory / name for name in names]
    else:
        paths = sorted(directory.glob("*.yaml"))
    return [path for path in paths if "vap_safeupgrades" not in path.name]


def adapt_crd_for_v1_20(node: Any) -> Any:
    """Drop what kube-apiserver v1.20 cannot read: every `x-kubernetes-validations` (CEL, from
    1.25) and each version's `selectableFields` (from 1.30).

    Both are unknown fields of the CRD API there, and unknown fields are refused (measured for
    CEL: by kubectl's validation and by the server-side-apply typed patch). Everything else
    stays as upstream wrote it, `default: ""` included: provision.py patches the OpenAPI
    validator that used to take `""` for null.
    """
    adapted = _without_cel(node)
    if isinstance(adapted, dict) and isinstance(adapted.get("spec"), dict):
        versions = adapted["spec"].get("versions")
        if isinstance(versions, list):
            adapted["spec"]["versions"] = [
                {k: v for k, v in version.items() if k != "selectableFields"}
                if isinstance(version, dict)
                else version
                for version in versions
            ]
    return adapted


def _without_cel(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: _without_cel(value)
            for key, value in node.items()
            if key != "x-kubernetes-validations"
        }
    if isinstance(node, list):
        return [_without_cel(item) for item in node]
    return node


# ---------------------------------------------------------------------- helpers


def _to_yaml(manifest: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> str:
    docs = [manifest] if isinstance(manifest, Mapping) else list(manifest)
    return yaml.safe_dump_all([dict(doc) for doc in docs], sort_keys=False)


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as response:  # loopback etcd health only
        return str(response.read().decode())


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM the process by PID, SIGKILL it if it lingers."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def running_cluster(binaries: provision.Binaries | None = None) -> Iterator[LocalCluster]:
    """Provision, start, yield, and clean up a cluster: for scripts and one-off experiments."""
    cluster = LocalCluster(binaries or provision.ensure_binaries())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.cleanup()
