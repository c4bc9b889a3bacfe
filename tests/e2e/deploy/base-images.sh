#!/bin/sh
# The base images the Dockerfiles and the systemd test image name: pulled when a registry
# answers, else made from Debian's packages (this host's apt mirror): debian:bookworm-slim
# by debootstrap (minbase), python:3.11-slim on top of it with Debian's python3 (3.11) under
# the paths the official image has (python, pip in /usr/local/bin). Needs root and Docker.
set -eu
have() { docker image inspect "$1" >/dev/null 2>&1; }
pull() { timeout 60 docker pull -q "$1" >/dev/null 2>&1; }

if ! have debian:bookworm-slim && ! pull debian:bookworm-slim; then
  mirror=$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n 1 || true)
  [ -n "$mirror" ] || mirror=$(grep -hE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk '{for (i=2;i<=NF;i++) if ($i ~ /^https?:/) {print $i; exit}}' | grep -v security | head -n 1 || true)
  [ -n "$mirror" ] || { echo "base-images: no Debian mirror in the apt sources" >&2; exit 1; }
  root=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  rm -f "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" -c . | docker import - debian:bookworm-slim >/dev/null
  rm -rf "$root"
fi

if ! have python:3.11-slim && ! pull python:3.11-slim; then
  ctx=$(mktemp -d)
  # TLS to the package mirrors may go through this host's CA (an egress proxy): bring it along.
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca.crt" 2>/dev/null || : >"$ctx/host-ca.crt"
  cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM debian:bookworm-slim
COPY host-ca.crt /usr/local/share/host-ca/ca-certificates.crt
ENV LANG=C.UTF-8 PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/usr/local/share/host-ca/ca-certificates.crt PIP_DEFAULT_TIMEOUT=180
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv python3-pip ca-certificates \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && ln -s /usr/bin/python3 /usr/local/bin/python && ln -s /usr/bin/pip3 /usr/local/bin/pip
CMD ["python3"]
DOCKERFILE
  docker build -q --network host -t python:3.11-slim "$ctx" >/dev/null
  rm -rf "$ctx"
fi
echo "base-images: debian:bookworm-slim and python:3.11-slim are here"
