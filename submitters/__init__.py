"""The submitter: serves ``SubmitterService`` for one pool on a site, through one batch-system backend.

Its rooms, top to bottom (each may import only the ones below it: ``[tool.importlinter]`` in pyproject.toml):

- ``cli``, ``testing``: entry points (``interlink-nats submitter``; helpers for tests and benchmarks);
- ``runtime``: the assembly, one :class:`~.runtime.Submitter` wiring every part and running the loops;
- ``edge``: what faces NATS: the RPC edge (``service``), announcements, the connection, /healthz and /metrics;
- ``settings``: command line > environment > config file > defaults, one section per backend;
- ``engine``: the work: submit and cancel (``submission``), polling, crash recovery, queries;
- ``state``: what must survive a crash: the SQLite registry, its schema, the event outbox, instance locks;
- ``jobdirs``: a job's directory on disk: creating it, its log files and their time index;
- ``backends``: one package per batch system behind one protocol, registered in ``backends.BACKENDS``;
- ``core``: pure decisions and the backend contract: phases and plans (``lifecycle``), statuses, errors.

What does not belong here: rendering pods (``services.scripts``) and the gateway; the RPC transport
(``services.bus.rpc``) is only used. See docs/submitters.md.
"""
