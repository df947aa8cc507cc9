# The compile-ci service image (web, its nginx front, workers). Non-root. The base image is a build argument so an
# air-gapped host can build FROM a locally imported Debian base instead of a registry image
# (`compile-ci images build service --local-base` also fills wheels/ and passes PIP_INSTALL_OPTS=--no-index).
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS venv
ARG PIP_INSTALL_OPTS=""
WORKDIR /src
COPY wheels /tmp/wheels
COPY pyproject.toml README.md ./
COPY service ./service
COPY runners ./runners
COPY suites ./suites
# A separate stage so that the wheels copied into the context never end up in a layer of the final image.
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check $PIP_INSTALL_OPTS --find-links /tmp/wheels .

FROM ${BASE_IMAGE}
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends git ca-certificates nginx \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 10001 compileci \
 && mkdir -p /var/lib/compile-ci && chown compileci /var/lib/compile-ci
COPY --from=venv /opt/venv /opt/venv

USER compileci
ENV PATH=/opt/venv/bin:$PATH COMPILE_CI_DATA_DIR=/var/lib/compile-ci PYTHONUNBUFFERED=1
EXPOSE 8000
ENTRYPOINT ["compile-ci"]
CMD ["web", "--bind", "0.0.0.0:8000"]
