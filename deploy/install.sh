#!/bin/sh
# netclaw as a system service, from this checkout (Debian 12, Ubuntu 24.04, any systemd host
# with Python 3.11+):
#   - a virtualenv in /opt/netclaw with netclaw and the Slack and Discord extras
#     (Debian's pip refuses system-wide installs: externally-managed-environment);
#   - the command /usr/local/bin/netclaw (a link into the venv);
#   - the system user and group netclaw (no login, no home): the service runs as it, and its
#     group may read /etc/netclaw/netclaw.json;
#   - the unit /etc/systemd/system/netclaw.service (not started: `netclaw init --system` first).
# usage: sudo deploy/install.sh [EXTRAS]     EXTRAS: pip extras, default slack,discord
# Run it again after `git pull` to upgrade; a running service is restarted.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
venv=/opt/netclaw
extras=${1:-slack,discord}

if [ "$(id -u)" != 0 ]; then
  echo "install.sh: run it as root: sudo $0" >&2
  exit 1
fi
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "install.sh: netclaw needs Python 3.11 or newer as python3 (apt-get install python3)" >&2
  exit 1
fi

if [ ! -x "$venv/bin/pip" ]; then
  [ -f "$venv/pyvenv.cfg" ] && rm -rf "$venv"  # a venv a failed attempt left without pip
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    [ -f "$venv/pyvenv.cfg" ] && rm -rf "$venv"
    # Debian and Ubuntu ship venv's pip separately.
    if command -v apt-get >/dev/null 2>&1; then
      echo "install.sh: installing python3-venv"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$venv"
  fi
fi
echo "install.sh: installing netclaw[$extras] from $src into $venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade "$src[$extras]"
ln -sfn "$venv/bin/netclaw" /usr/local/bin/netclaw

if ! getent passwd netclaw >/dev/null 2>&1; then
  getent group netclaw >/dev/null 2>&1 || groupadd --system netclaw
  useradd --system --gid netclaw --no-create-home --home-dir /var/lib/netclaw \
    --shell /usr/sbin/nologin --comment "netclaw daemon" netclaw
fi
install -d -m 0755 /etc/netclaw
install -m 0644 "$src/deploy/netclaw.service" /etc/systemd/system/netclaw.service
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl try-restart netclaw.service  # an upgrade: the new code runs now
fi
echo "install.sh: $("$venv/bin/netclaw" --version) installed; next: sudo netclaw init --system"
