"""Reaching the running daemon from a command."""

from __future__ import annotations

import argparse

from netclaw.client import DaemonClient
from netclaw.config import load_settings


def client_for(args: argparse.Namespace) -> DaemonClient:
    return DaemonClient(load_settings(args.config))
