"""What must survive a crash: the SQLite registry (``registry``, its table in ``schema``), the group-commit
thread it writes through (``batching``), the event outbox (``outbox``) and the instance locks (``ownership``).
"""
