"""Commands a session handles whatever its activity: a message admitted, a decision, a read, a chosen model, its sub-agents."""
