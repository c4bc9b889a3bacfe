"""What a session journals and how its state folds from it: the events, their JSON form, the state's values, its sub-agent records and snapshots."""
