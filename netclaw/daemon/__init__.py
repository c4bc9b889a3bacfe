"""The daemon: the running netclaw (``Daemon``: wiring, start-up in order, shutdown in
reverse, signals, reload) and ``netclaw run`` (``run_daemon``). Behind it: one daemon per
data directory (``_lock``), what it says about itself (``_health``: ``/healthz``,
``/metrics`` gauges, systemd's status) and the steps of start-up and shutdown that need
only what they are handed (``_steps``)."""

from netclaw.daemon._daemon import Daemon
from netclaw.daemon._foreground import run_daemon, run_forever
from netclaw.process.lock import DataDirLock

__all__ = ["Daemon", "DataDirLock", "run_daemon", "run_forever"]
