"""``netclaw`` with the Agents SDK's token validator fetching the Bot Framework's keys from a
:class:`~tests.fakes.teams_api.FakeTeams` — how a daemon subprocess trusts the fake's
signed activities (in-process tests patch the same entry: the driver's ``in_process``).
The SDK has no setting for where the keys are: it maps each issuer to a constant URL.

    python -m tests.e2e.netclaw_with_fake_teams KEYS_URL run --config netclaw.json
"""

from __future__ import annotations

import sys

ISSUER = "https://api.botframework.com"  # the issuer of the tokens the fake signs


def main(argv: list[str]) -> int:
    from microsoft_agents.hosting.core.authorization._entra_issuers import BOTFRAMEWORK_JWKS_URIS

    from netclaw.cli import main as netclaw_main

    keys_url, rest = argv[0], argv[1:]
    BOTFRAMEWORK_JWKS_URIS[ISSUER] = keys_url
    return netclaw_main(rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
