"""Who is resident on this node: the manager, the resident bound, hand-offs to other nodes, restarts of broken sessions and warm starts."""
