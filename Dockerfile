# syntax=docker/dockerfile:1
# The policy webhook image: a virtualenv with the webhook and its dependencies on python:slim,
# and the certificate scripts that components/cert-renewal runs from the same image.
#
#   docker build -t policy-webhook:0.1.0 \
#     --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE="$(git remote get-url origin)" .
#
# Supply chain:
# - The base is pinned by digest: the tag says what it is, the digest is what is pulled, so a
#   rebuild gets the same bytes until someone changes this line. The digest is the multi-arch
#   index of python:3.11-slim-bookworm (Python 3.11.16, Debian 12) as Docker's official-images
#   ledger, docker-library/repo-info (repos/python/remote/3.11-slim-bookworm.md), records it.
#   To move on: `docker buildx imagetools inspect python:3.11-slim-bookworm` and paste the
#   index digest here.
# - Every Python package comes from requirements.lock (`make lock`, from pyproject.toml): exact
#   versions with their sha256 hashes, so pip refuses any file whose hash differs. The build
#   backend (setuptools, wheel) is in the lock too and builds without isolation, so nothing is
#   fetched unpinned.
# - OCI labels say where the image comes from (build arguments VERSION and REVISION).
#
# - The core is compiled with mypyc (setup.py, POLICY_WEBHOOK_COMPILE=1): a C compiler from
#   Debian's packages in the builder stage only; mypy, which carries mypyc, is in the lock as a
#   build requirement. The final image has neither. Why: docs/performance.md, *Choices*.
#
# Stage 1 installs into a virtualenv; stage 2 copies only that virtualenv and the two scripts.
# No pip cache is written anywhere (--no-cache-dir, PIP_NO_CACHE_DIR).

ARG BASE=python:3.11-slim-bookworm@sha256:0bee7276f83efd4a1ee05bbbf4281d95ed28e079220a9457f25a93e3f1e3c31b

FROM ${BASE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# gcc for mypyc's C; python:slim has the headers. Before the lock: this layer changes least.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
# The lock first: its layer (all dependencies) is reused while only the webhook's code changes.
COPY requirements.lock ./
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock

# .dockerignore keeps the context small (no .venv, .git, caches, tests).
COPY . .

# pip byte-compiles what it installs, which matters: the runtime root filesystem is read-only,
# so Python could not write .pyc files there. The webhook's own wheel is built with the locked
# backend, its core compiled, and installed without looking at any index; the build's tools
# (mypy, the backend, what only they need, and the installer) are then removed: the compiled
# modules need none of them. `pip check` first proves nothing left needs them either; the last
# lines prove the entry point starts and runs the compiled core.
RUN POLICY_WEBHOOK_COMPILE=1 \
    /opt/venv/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-cache-dir --no-deps --no-index /wheels/*.whl \
 && /opt/venv/bin/pip uninstall --yes \
    mypy mypy-extensions librt pathspec ast-serialize setuptools wheel packaging \
 && /opt/venv/bin/pip check \
 && /opt/venv/bin/pip uninstall --yes pip \
 && /opt/venv/bin/policy-webhook --help > /dev/null \
 && /opt/venv/bin/policy-webhook version | grep -q "core compiled" \
 && /opt/venv/bin/python /src/certs/renew_in_cluster.py --help > /dev/null


# The same base as the builder: the venv's `python` is a symlink to this image's interpreter.
FROM ${BASE}

ARG VERSION=0.1.0
ARG REVISION=unknown
# The repository URL the image is built from, e.g. the release pipeline's clone URL.
ARG SOURCE=unknown

LABEL org.opencontainers.image.title="policy-attachment-webhook" \
      org.opencontainers.image.description="Admission webhook that makes Gateway API policy attachment safe and visible" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

# The same path as in the builder: a virtualenv's scripts name their interpreter by absolute path.
COPY --from=builder /opt/venv /opt/venv
# What the CronJob of components/cert-renewal runs (renew_in_cluster.py imports generate.py
# from its own folder).
COPY --from=builder /src/certs/generate.py /src/certs/renew_in_cluster.py /opt/policy-webhook/certs/

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    POLICY_WEBHOOK_BUILD_REVISION=${REVISION}

# Numeric, so that the kubelet can check runAsNonRoot without reading /etc/passwd; 65532 is the
# conventional "nonroot" ID of distroless images and matches the Deployment's runAsUser.
USER 65532:65532

EXPOSE 8443

# No HEALTHCHECK: Kubernetes ignores it (the kubelet runs the Deployment's readiness and
# liveness probes against /readyz and /healthz), and the webhook speaks HTTPS only, so a
# check would need a client and certificate handling in the image for no benefit.

ENTRYPOINT ["policy-webhook"]
CMD ["serve"]
