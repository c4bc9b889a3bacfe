"""Work the daemon runs beside the sessions: the reminder scheduler, the sub-agent courier, the providers' health probes."""
