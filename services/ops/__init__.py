"""Running our processes: ``probes`` (/healthz and /metrics for processes without a web stack: submitter,
controller) and ``nats_server`` (a supervised local nats-server, for ``interlink-nats up`` and tests).
"""
