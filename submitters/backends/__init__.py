"""Batch-system backends behind one small ``Backend`` protocol (``base``): ``shell`` and ``slurm``.

A backend talks to its batch system only (subprocesses via ``proc.run_command``, never a shell)
and reports plain ``Observation``s; it never touches the registry, NATS or protobuf statuses.
Pure text handling lives apart (``slurm_parse``) so it is tested from recorded output.
"""
