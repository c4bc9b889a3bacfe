"""What every provider speaks (the values live in :mod:`netclaw.llm`, which imports no
I/O library; they are named here for the implementations beside this module)."""

from netclaw.llm import Completion, Delta, OnDelta, Provider, ProviderRequest, ToolSchema, Usage

__all__ = ["Completion", "Delta", "OnDelta", "Provider", "ProviderRequest", "ToolSchema", "Usage"]
