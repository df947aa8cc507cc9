# Redis for the compose stack on a host without a registry: Debian's redis-server on the local base.
# With a registry, deploy/compose.yaml uses the official redis image instead (COMPILE_CI_REDIS_IMAGE).
ARG BASE_IMAGE=compile-ci/base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /data && chown redis:redis /data
USER redis
WORKDIR /data
