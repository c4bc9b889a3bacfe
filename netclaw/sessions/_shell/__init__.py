"""The imperative shell around the pure session: the actor, the effector that carries its effects out, the write path, the loop's work, recovery, and what the actor needs from the daemon."""
