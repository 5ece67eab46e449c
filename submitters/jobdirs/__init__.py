"""A job's directory on disk (the kernel.layout contract): creating it 0700 with its script (``files``), reading
its container files, and its logs for GetLogs (``logs``, with a time index in ``logindex``).
"""
