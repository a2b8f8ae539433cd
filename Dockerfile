# syntax=docker/dockerfile:1
# The policy webhook image: a virtualenv with the webhook and its dependencies on python:slim.
#
#   docker build -t policy-webhook:0.1.0 .
#
# Stage 1 builds a wheel of this repository and installs it with its dependencies into a
# virtualenv; stage 2 copies only that virtualenv. The build backend, the wheel files and pip
# stay in stage 1; no pip cache is written anywhere (--no-cache-dir, PIP_NO_CACHE_DIR).

FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# .dockerignore keeps the context small (no .venv, .git, caches, tests).
COPY . .

# pip byte-compiles what it installs, which matters: the runtime root filesystem is read-only,
# so Python could not write .pyc files there. The installer itself is removed from the venv
# afterwards (not needed at run time), and the last line proves the entry point starts.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && /opt/venv/bin/pip install --no-cache-dir /wheels/*.whl \
 && /opt/venv/bin/pip uninstall --yes pip setuptools \
 && /opt/venv/bin/policy-webhook --help > /dev/null


# The same base as the builder: the venv's `python` is a symlink to this image's interpreter.
FROM python:3.11-slim

# The same path as in the builder: a virtualenv's scripts name their interpreter by absolute path.
COPY --from=builder /opt/venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# Numeric, so that the kubelet can check runAsNonRoot without reading /etc/passwd; 65532 is the
# conventional "nonroot" ID of distroless images and matches the Deployment's runAsUser.
USER 65532:65532

EXPOSE 8443

# No HEALTHCHECK: Kubernetes ignores it (the kubelet runs the Deployment's readiness and
# liveness probes against /readyz and /healthz), and the webhook speaks HTTPS only, so a
# check would need a client and certificate handling in the image for no benefit.

ENTRYPOINT ["policy-webhook"]
CMD ["serve"]
