"""What faces NATS: the RPC edge (``service``: requests in, domain errors → status codes), the pool's
announcements (``announcer``), the connection (``natsconn``) and the process's /healthz and /metrics
(``observability``). No decisions here: they are the engine's and the core's.
"""
