"""What the model is offered on each call: the settings in force, the prompt's projection and trim, the turn's volatile tail, and the context ladder."""
