"""The ``shell`` backend: jobs as detached processes on this host (``backend``), through one long-lived
launcher and a runner per job (``processes``)."""
