# The compile-ci service image (web and workers). Non-root. The base image is a build argument so an
# air-gapped host can build FROM a locally imported Debian base instead of a registry image.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 compileci

WORKDIR /app
COPY pyproject.toml README.md ./
COPY service ./service
COPY runners ./runners
COPY suites ./suites
RUN python -m pip install --no-cache-dir . && mkdir -p /var/lib/compile-ci && chown compileci /var/lib/compile-ci

USER compileci
ENV COMPILE_CI_DATA_DIR=/var/lib/compile-ci PYTHONUNBUFFERED=1
EXPOSE 8000
ENTRYPOINT ["compile-ci"]
CMD ["web", "--bind", "0.0.0.0:8000"]
