"""Channel adapters: each turns platform events into gateway messages."""
