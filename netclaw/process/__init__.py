"""The process itself: its event loop, the service manager's notifications, users and groups, logs, heap and metrics."""
