"""Submitter runtime (serves ``SubmitterService`` for one pool) and one module per backend in ``backends``."""
