"""Names vulture reports as unused that are used, for reasons it cannot see (`make lint`).

Each line names one, with why it stays.
"""

from kubernetes_asyncio.client import Configuration

from webhook.core.admission import reviews
from webhook.core.engine.memo import Layered
from webhook.shell.cli import manifests
from webhook.shell.cli.main import kubectl_plugin
from webhook.shell.cluster.informers import ClusterSource
from webhook.shell.cluster.leader import LeaderElector
from webhook.shell.cluster.reconciler import Reconciler
from webhook.shell.process import logs
from webhook.shell.process.readiness import Readiness

# AdmissionReview v1 fields: the wire format, read and written as TypedDicts.
reviews.UserInfo.username
reviews.Request.subResource
reviews.Request.userInfo
reviews.Request.oldObject
reviews.Request.dryRun
reviews.StatusDetails.causes
reviews.Status.details
reviews.Response.auditAnnotations
reviews.Response.patch
reviews.Response.patchType
# The memo table protocol: `in` and item assignment, used through the `Table` protocol.
Layered.__contains__
Layered.__setitem__
# The kubectl plugin's console script (pyproject.toml).
kubectl_plugin
# Seams the tests, the fuzzer and the benchmarks use.
manifests.read_paths
ClusterSource.wait_synced
LeaderElector.wait_leading
Reconciler.wait_idle
Readiness.conditions
# The logging module's switches, set to skip work on every record.
logs.logging.logThreads
logs.logging.logProcesses
logs.logging.logMultiprocessing
# Read by kubernetes-asyncio's REST client on every request: a proxy's credentials (kubeapi).
Configuration.proxy_headers
# Read by aiohttp on every request: whether to look up ~/.netrc and proxy variables (kubeapi).
ClientSession._trust_env
