"""netclaw: a durable home for an AI agent in chat."""

__version__ = "0.1.0"
