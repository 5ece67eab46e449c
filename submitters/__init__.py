"""Submitter runtime (serves ``SubmitterService`` for one pool on a site) and its backends.

What belongs here: the pure lifecycle core (``lifecycle``: phases, transitions, plans) and
status mapping (``status``), the runtime that executes them (``runtime`` wiring ``ownership``,
``submission``, ``recovery``, ``queries``, ``polling``, ``outbox``, ``announcer``), the RPC edge
(``service``), the durable registry, settings and CLI, job-directory I/O, and one module per
backend in ``backends``. What does not: rendering pods (``services.scripts``) and the gateway;
the RPC transport (``services.rpc``) is only used. See docs/submitters.md.
"""
