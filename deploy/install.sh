#!/bin/sh
# netclaw as a system service, from this checkout (Debian 12, Ubuntu 24.04, any systemd host
# with Python 3.11+):
#   - a virtualenv in /opt/netclaw with netclaw and the Slack and Discord extras
#     (Debian's pip refuses system-wide installs: externally-managed-environment);
#   - the command /usr/local/bin/netclaw (a link into the venv);
#   - the system user and group netclaw (no login, no home): the service runs as it, and its
#     group may read /etc/netclaw/netclaw.json;
#   - the unit /etc/systemd/system/netclaw.service (not started: `netclaw init --system` first);
#   - with --shell-sandbox, for the shell tool: the bubblewrap package (apt-get, where there is
#     one) and the drop-in /etc/systemd/system/netclaw.service.d/shell-sandbox.conf, which
#     relaxes the unit's hardening exactly as far as bubblewrap needs (the file says why).
# usage: sudo deploy/install.sh [--shell-sandbox] [EXTRAS]   EXTRAS: pip extras, default slack,discord
# Run it again after `git pull` to upgrade; a running service is restarted. An installed
# drop-in is kept up to date (remove it by hand to go back to the stricter unit).
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
venv=/opt/netclaw
dropin=/etc/systemd/system/netclaw.service.d/shell-sandbox.conf
extras=slack,discord
shell_sandbox=0
for arg in "$@"; do
  case $arg in
    --shell-sandbox) shell_sandbox=1 ;;
    -*) echo "install.sh: unknown option $arg; usage: sudo $0 [--shell-sandbox] [EXTRAS]" >&2; exit 2 ;;
    *) extras=$arg ;;
  esac
done

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
if [ "$shell_sandbox" = 1 ] || [ -f "$dropin" ]; then
  if ! command -v bwrap >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      echo "install.sh: installing bubblewrap (the shell tool's sandbox)"
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
    else
      echo "install.sh: install bubblewrap with your package manager: the shell tool's sandbox needs it" >&2
    fi
  fi
  install -d -m 0755 "$(dirname "$dropin")"
  install -m 0644 "$src/deploy/netclaw.service.d/shell-sandbox.conf" "$dropin"
  echo "install.sh: $dropin lets bubblewrap run under the unit (tools.shell.sandbox \"bwrap\")"
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl try-restart netclaw.service  # an upgrade: the new code runs now
fi
echo "install.sh: $("$venv/bin/netclaw" --version) installed; next: sudo netclaw init --system"
