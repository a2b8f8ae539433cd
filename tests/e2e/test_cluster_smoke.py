"""The end-to-end infrastructure itself works: a real v1.20 API server with Gateway API CRDs.

If these fail, every webhook e2e test would fail for reasons that have nothing to do with the
webhook; read the attached process logs first.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from cluster import LocalCluster

GATEWAY_API_CRDS = [
    "gatewayclasses",
    "gateways",
    "httproutes",
    "grpcroutes",
    "referencegrants",
    "listenersets",
]

GATEWAY_AND_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: smoke}
spec: {controllerName: example.com/smoke}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: smoke-gw, namespace: default}
spec:
  gatewayClassName: smoke
  listeners:
  - {name: http, protocol: HTTP, port: 80}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: smoke-route, namespace: default}
spec:
  parentRefs:
  - {name: smoke-gw}
  rules:
  - matches:
    - path: {type: PathPrefix, value: /smoke}
    backendRefs:
    - {name: backend, port: 8080}
"""


def test_apiserver_is_ready_and_reports_v1_20(cluster: LocalCluster) -> None:
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)
    assert (version["major"], version["minor"], version["gitVersion"]) == ("1", "20", "v1.20.2")


def test_admin_is_authenticated_by_client_cert_and_rbac_is_on(cluster: LocalCluster) -> None:
    assert cluster.kubectl("auth", "can-i", "create", "gateways").stdout.strip() == "yes"
    denied = cluster.kubectl("auth", "can-i", "create", "gateways", "--as=nobody", check=False)
    assert denied.stdout.strip() == "no"


@pytest.mark.parametrize("plural", GATEWAY_API_CRDS)
def test_gateway_api_crd_is_served(cluster: LocalCluster, plural: str) -> None:
    crd = cluster.get_json("crd", f"{plural}.gateway.networking.k8s.io")
    established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert established["Established"] == "True"


def test_gateway_and_httproute_round_trip_through_kubectl(cluster: LocalCluster) -> None:
    cluster.apply(GATEWAY_AND_ROUTE)
    route = cluster.get_json("httproute", "smoke-route", "-n", "default")
    assert route["spec"]["parentRefs"][0]["name"] == "smoke-gw"
    assert route["spec"]["rules"][0]["matches"][0]["path"]["value"] == "/smoke"
    gateway = cluster.get_json("gateway", "smoke-gw", "-n", "default")
    assert gateway["spec"]["listeners"][0]["port"] == 80


def test_new_user_gets_only_what_rbac_grants(cluster: LocalCluster) -> None:
    cluster.apply(GATEWAY_AND_ROUTE)
    kubeconfig = cluster.create_user("smoke-reader", groups=["smoke-readers"])
    cluster.kubectl(
        "create",
        "clusterrole",
        "smoke-gateway-reader",
        "--verb=get,list",
        "--resource=gateways.gateway.networking.k8s.io",
    )
    cluster.kubectl(
        "create",
        "clusterrolebinding",
        "smoke-gateway-reader",
        "--clusterrole=smoke-gateway-reader",
        "--group=smoke-readers",
    )
    listed = cluster.kubectl("get", "gateways", "-A", kubeconfig=kubeconfig)
    assert "smoke-gw" in listed.stdout
    forbidden = cluster.kubectl(
        "delete", "gateway", "smoke-gw", "-n", "default", kubeconfig=kubeconfig, check=False
    )
    assert forbidden.returncode != 0
    assert "forbidden" in forbidden.stderr.lower()


def test_objects_survive_an_apiserver_restart(cluster: LocalCluster) -> None:
    cluster.apply(GATEWAY_AND_ROUTE)
    before = cluster.get_json("httproute", "smoke-route", "-n", "default")["metadata"]["uid"]
    seconds = cluster.restart_apiserver()
    after = cluster.get_json("httproute", "smoke-route", "-n", "default")["metadata"]["uid"]
    assert after == before
    assert seconds < 60


def test_objects_survive_stopping_and_starting_etcd_and_apiserver(cluster: LocalCluster) -> None:
    cluster.apply(GATEWAY_AND_ROUTE)
    before = cluster.get_json("gateway", "smoke-gw", "-n", "default")["metadata"]["uid"]
    cluster.stop()
    assert cluster.pids == {}
    cluster.start()
    after = cluster.get_json("gateway", "smoke-gw", "-n", "default")["metadata"]["uid"]
    assert after == before
    assert set(cluster.pids) == {"etcd", "kube-apiserver"}
