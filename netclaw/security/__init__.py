"""Trust and its guards: secrets redacted, untrusted text labelled, tool policy and per-person roles, file confinement, the control token and the audit log."""
