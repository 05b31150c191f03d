# The edgehub image: one `edgehub` binary for the hub, the discovery agent, the
# discovery handlers and the cloud-side manager (manifests/ choose the sub-command).
#
#   docker build -t ghcr.io/edgehub/edgehub:0.1.0 .
#
# The tag follows pyproject.toml's version; manifests/ reference this tag.
# Runs as root: the hub and the agent write into root-owned host directories
# (/etc/kubernetes/cache, /var/lib/kubelet/device-plugins, /var/lib/akri); the
# manifests drop every capability and make the root filesystem read-only instead.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cmd ./cmd
COPY discovery ./discovery
COPY inputbounds ./inputbounds
COPY kubecontrol ./kubecontrol
COPY managers ./managers
COPY nodeautonomy ./nodeautonomy
COPY yurthub ./yurthub
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# libudev for the udev handler (pyudev loads it at run time); iproute2 for the hub's
# dummy interface (--enable-dummy-if runs `ip`).
RUN apt-get update \
    && apt-get install -y --no-install-recommends libudev1 iproute2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
# Byte-code is compiled at install time: the containers run with a read-only root.
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["edgehub"]
CMD ["--help"]
