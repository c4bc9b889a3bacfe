"""The gateway by role, held by the code: only the daemon holds the whole gateway (every
other caller is handed the services it uses, typed by their roles), and each service
stays small.

mypy holds each caller to the protocol it is typed by; these tests hold what mypy cannot
see: who names the container, and how big the services grow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import netclaw.gateway

REPO = Path(__file__).resolve().parents[2]
GATEWAY = REPO / "netclaw" / "gateway"
MAX_SERVICE_LINES = 300


def _modules() -> list[Path]:
    return sorted([*(REPO / "netclaw").rglob("*.py"), *(REPO / "adapters").rglob("*.py")])


def _names_taken_from_the_gateway(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "netclaw.gateway":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute) and node.attr == "Gateway":  # netclaw.gateway.Gateway
            found.add("Gateway")
    return found


def test_only_the_daemon_holds_the_whole_gateway() -> None:
    holders = sorted(
        str(path.relative_to(REPO))
        for path in _modules()
        if GATEWAY not in path.parents and "Gateway" in _names_taken_from_the_gateway(path)
    )
    assert holders == ["netclaw/daemon/_daemon.py"], (
        "hand these the services they use, typed by their roles (netclaw/gateway/_roles.py), "
        f"not the whole Gateway: {holders}"
    )


def test_the_gateway_face_offers_roles_not_services() -> None:
    services = sorted(name for name in netclaw.gateway.__all__ if name.endswith("Service"))
    assert services == [], f"callers take roles (protocols), not the service classes: {services}"


def test_every_service_stays_small() -> None:
    big = []
    for path in sorted(GATEWAY.glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_SERVICE_LINES:
                    big.append(f"{path.name}: {node.name} ({lines} lines)")
    assert not big, f"split by the callers' roles: {big}"
