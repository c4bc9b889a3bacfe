"""The systemd unit and the shell sandbox's drop-in, read as files: the unit keeps its
hardening (nothing relaxed for the sandbox), and the drop-in relaxes exactly the settings
bubblewrap was shown to need (tests/e2e/test_deploy.py runs both under a real systemd and
rates them with ``systemd-analyze security``), each with a comment saying why."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "deploy" / "netclaw.service"
DROP_IN = REPO / "deploy" / "netclaw.service.d" / "shell-sandbox.conf"


def directives(path: Path) -> list[tuple[str, str, list[str]]]:
    """(key, value, the comment above it) for each setting of ``path``: the comment lines
    before it, or before the settings right above it (one comment may explain a group)."""
    found: list[tuple[str, str, list[str]]] = []
    comments: list[str] = []
    after_setting = False
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#"):
            comments = [*([] if after_setting else comments), line]
            after_setting = False
        elif "=" in line:
            key, value = line.split("=", 1)
            found.append((key, value, comments))
            after_setting = True
        else:
            comments, after_setting = [], False
    return found


def test_the_unit_stays_hardened() -> None:
    settings = {(key, value) for key, value, _ in directives(UNIT)}
    for kept in [
        ("RestrictNamespaces", "yes"),
        ("ProcSubset", "pid"),
        ("ProtectProc", "invisible"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelLogs", "yes"),
        ("ProtectHostname", "yes"),
        ("PrivateUsers", "yes"),
        ("NoNewPrivileges", "yes"),
        ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"),
        ("SystemCallFilter", "@system-service"),
        ("SystemCallFilter", "~@privileged @resources"),
        ("CapabilityBoundingSet", ""),
    ]:
        assert kept in settings, kept
    # The sandbox's relaxations live in the drop-in only, not as lines to uncomment here.
    text = UNIT.read_text(encoding="utf-8")
    assert "#RestrictNamespaces" not in text and "netclaw.service.d/shell-sandbox.conf" in text


def test_the_drop_in_relaxes_what_bubblewrap_needs_and_says_why() -> None:
    found = directives(DROP_IN)
    assert [(key, value) for key, value, _ in found] == [
        ("RestrictNamespaces", "user mnt pid ipc uts net cgroup"),
        ("ProcSubset", "all"),
        ("ProtectKernelTunables", "no"),
        ("ProtectKernelLogs", "no"),
        ("RestrictAddressFamilies", "AF_NETLINK"),  # added to the unit's list, not replacing it
        ("SystemCallFilter", "@mount capset sethostname"),  # added to the allow list
        ("ProtectHostname", "no"),
    ]
    for key, _, comments in found:
        assert comments, f"{key} in {DROP_IN.name} has no comment saying why"
    text = DROP_IN.read_text(encoding="utf-8")
    assert text.count("[Service]") == 1 and "ExecStart" not in text
    # What it does not touch stays as the unit has it.
    for kept in ("ProtectProc", "PrivateUsers", "NoNewPrivileges", "CapabilityBoundingSet", "ProtectSystem"):
        assert all(key != kept for key, _, _ in found), kept


def test_install_sh_installs_the_drop_in_where_systemd_reads_it() -> None:
    script = (REPO / "deploy" / "install.sh").read_text(encoding="utf-8")
    assert "dropin=/etc/systemd/system/netclaw.service.d/shell-sandbox.conf" in script
    assert '"$src/deploy/netclaw.service.d/shell-sandbox.conf"' in script
    assert "apt-get install -y -qq bubblewrap" in script
