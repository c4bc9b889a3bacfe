"""The four activities a session is in (idle, a turn, compacting, passivating): each owns its state and returns the next."""
