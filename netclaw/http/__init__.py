"""The HTTP surface: the control API's routes, who may call them, the questions and MCP routes, the cluster's routes, the listeners and the shared HTTP plumbing."""
