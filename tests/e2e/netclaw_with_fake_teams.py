"""``netclaw`` with the Agents SDK's token validator fetching the Bot Framework's keys from a
:class:`~tests.fakes.teams_api.FakeTeams` — how a daemon subprocess trusts the fake's
signed activities (in-process tests call ``point_sdk_at`` themselves).

    python -m tests.e2e.netclaw_with_fake_teams KEYS_URL run --config netclaw.json
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from netclaw.cli import main as netclaw_main
    from tests.fakes.teams_api import point_sdk_at

    keys_url, rest = argv[0], argv[1:]
    point_sdk_at(keys_url)
    return netclaw_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
