"""The foreground process (``netclaw run``): the config loaded and logging set up, the
daemon started, systemd told, signals waited for (SIGHUP reloads), the daemon stopped."""

from __future__ import annotations

import logging
import os
import signal

from netclaw.config import find_config_path, load_settings
from netclaw.daemon._daemon import Daemon
from netclaw.daemon._steps import call
from netclaw.process.heap import settle_heap
from netclaw.process.logs import configure_logging, log_startup_failure
from netclaw.process.service import SignalWaiter, heartbeat

log = logging.getLogger(__name__)


def run_forever(daemon: Daemon) -> int:
    """Start, tell systemd, wait for signals (SIGHUP reloads), stop."""
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    with SignalWaiter((signal.SIGTERM, signal.SIGINT, signal.SIGHUP)) as signals:
        try:
            daemon.start()
            assert daemon.io is not None
            settle_heap()
            daemon.notifier.ready(daemon.io.run(call(daemon.status_line), 5))
            if daemon.notifier.enabled:
                daemon.heartbeat_task = daemon.io.submit(heartbeat(daemon.notifier, daemon.status_line))
            while True:
                arrived = signals.wait()  # no polling: a signal wakes this at once
                if stop_signals.intersection(arrived):
                    break
                if signal.SIGHUP in arrived:
                    daemon.reload()
            daemon.notifier.stopping()
            log.info("netclaw stopping")
            return 0
        finally:
            daemon.stop()


def run_daemon(config_path: str | None, log_level: str | None = None) -> int:
    """``netclaw run``: load the config, set up logging, say what was loaded, run. A failure
    to start is one error line (the traceback at debug), exit status 1."""
    os.umask(0o077)  # whatever the daemon creates (database, WAL, token, workspace) is private
    configure_logging(log_level or "info")  # until the config says otherwise: errors need a voice
    try:
        settings = load_settings(config_path)
        found = find_config_path(config_path)
        daemon = Daemon(settings, config_path=config_path, log_level=log_level)
        daemon.apply_log_config()
        if found is not None and found.is_file():
            log.info("config: %s", found.resolve())
        else:
            log.info(
                "config: no file found (looked for --config, $NETCLAW_CONFIG, ./netclaw.json, "
                "~/.config/netclaw/netclaw.json, /etc/netclaw/netclaw.json); using built-in "
                "defaults. `netclaw init` writes one"
            )
        return run_forever(daemon)
    except Exception as exc:  # noqa: BLE001 - whatever stopped start-up, said once and clearly
        log_startup_failure(log, exc)
        return 1
