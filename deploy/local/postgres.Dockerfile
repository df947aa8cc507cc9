# PostgreSQL for the compose stack on a host without a registry: Debian's postgresql on the local base, started
# like the official image (POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB; data in /var/lib/postgresql/data).
ARG BASE_IMAGE=compile-ci/base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \
 && rm -rf /var/lib/apt/lists/* && mkdir -p /var/lib/postgresql/data /run/postgresql \
 && chown -R postgres:postgres /var/lib/postgresql /run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
USER postgres
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
