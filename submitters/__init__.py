"""Submitter runtime (serves ``SubmitterService`` for one pool on a site) and its backends.

What belongs here: the runtime (``runtime``), its settings and CLI, the durable registry, the
pure status mapping (``status``, no I/O), job-directory I/O, and one module per backend in
``backends``. What does not: rendering pods (``services.scripts``) and the RPC transport
(``services.rpc``), which this package only uses. See docs/submitters.md.
"""
