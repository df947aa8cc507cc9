#!/bin/sh
# First start: create the cluster, the role and the database from the environment, as the official image does.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -w start -o "-c listen_addresses=''" >/dev/null
  createdb --username="$POSTGRES_USER" "$POSTGRES_DB" 2>/dev/null || true
  pg_ctl -w stop >/dev/null
fi
exec postgres -c listen_addresses='*'
