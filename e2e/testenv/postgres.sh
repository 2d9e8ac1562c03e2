#!/usr/bin/env bash
# make testenv: make sure Debian's PostgreSQL server binaries (initdb, pg_ctl,
# postgres) are installed; e2e/testenv/postgres.go runs one server per local
# control plane. Looks where postgres.go looks: $MAASCTL_POSTGRES_BIN, the
# folder `initdb` on PATH resolves to, /usr/lib/postgresql/*/bin.
# As root it installs the package `postgresql` when they are missing, without
# Debian's default cluster (nothing is started); otherwise it says why the
# tests that need PostgreSQL will not run. Exit 0 when found or installed.
set -euo pipefail

have() { [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]; }

find_bin() {
  if [ -n "${MAASCTL_POSTGRES_BIN:-}" ]; then
    have "$MAASCTL_POSTGRES_BIN" && { echo "$MAASCTL_POSTGRES_BIN"; return 0; }
    return 1
  fi
  local p
  if p=$(command -v initdb 2>/dev/null); then
    p=$(dirname "$(readlink -f "$p")")
    have "$p" && { echo "$p"; return 0; }
  fi
  for p in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -rn); do
    have "$p" && { echo "$p"; return 0; }
  done
  return 1
}

if dir=$(find_bin); then
  echo "postgresql: $("$dir/postgres" --version) in $dir"
  exit 0
fi
if [ -n "${MAASCTL_POSTGRES_BIN:-}" ]; then
  echo "postgresql: MAASCTL_POSTGRES_BIN=$MAASCTL_POSTGRES_BIN has no initdb, pg_ctl and postgres; unset it or point it at e.g. /usr/lib/postgresql/15/bin" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "postgresql: initdb, pg_ctl and postgres not found (MAASCTL_POSTGRES_BIN, PATH, /usr/lib/postgresql/*/bin) and not root, so not installing;" >&2
  echo "postgresql: the tests that start the local control plane will skip (or fail with MAASCTL_REQUIRE_TESTENV=1) until you run: sudo apt-get install postgresql" >&2
  exit 0
fi
echo "postgresql: not found; installing Debian's postgresql (without its default cluster)"
# postgresql-common's createcluster.conf includes createcluster.d/*.conf,
# read before it creates the default cluster "main": the tests run their
# own servers, nothing else should listen on 5432.
mkdir -p /etc/postgresql-common/createcluster.d
echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/maasctl-no-main-cluster.conf
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confold postgresql
dir=$(find_bin) || { echo "postgresql: installed, but initdb/pg_ctl/postgres still not found" >&2; exit 1; }
echo "postgresql: $("$dir/postgres" --version) in $dir"
