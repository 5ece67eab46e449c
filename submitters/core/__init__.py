"""The submitter's pure core: no I/O (checked by tests/contracts/test_import_contracts.py).

``backend``: the protocol every backend implements and the values crossing it; ``lifecycle``: phases,
legal moves and the plans the engine carries out; ``status``: observations → ``JobStatus``; ``errors``:
what went wrong in the submitter's own terms; ``fastwire``: the hot messages' bytes, from the generated codecs.
"""

__pure__ = True  # no I/O, not even through what it imports (held by tests/contracts/test_import_contracts.py)
