"""Built-in tools."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from netclaw.errors import ToolError
from netclaw.tools._registry import Tool, ToolContext


async def _current_time(args: Mapping[str, Any], ctx: ToolContext) -> str:
    name = args.get("timezone") or "UTC"
    if not isinstance(name, str):
        raise ToolError("timezone must be a string such as 'Europe/Berlin'")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ToolError(f"unknown timezone {name!r}; use an IANA name such as 'America/New_York'") from exc
    now = dt.datetime.now(zone)
    return f"{now.isoformat(timespec='seconds')} ({name}, {now.strftime('%A')})"


CURRENT_TIME = Tool(
    name="current_time",
    description="The current date and time, optionally in a given IANA timezone.",
    parameters={
        "type": "object",
        "properties": {
            "timezone": {
                "type": "string",
                "description": "IANA timezone, e.g. 'Europe/Berlin'. Default UTC.",
            }
        },
        "additionalProperties": False,
    },
    handler=_current_time,
)

BUILTIN_TOOLS = (CURRENT_TIME,)
