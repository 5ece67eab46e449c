"""The services next to the kernel: the gateway, and what more than one process shares.

- ``gateway``: the interLink plugin HTTP app (one of the three processes);
- ``bus``: what every process speaks on NATS: RPC for the generated services, the events stream;
- ``scripts``: pod → job script (the gateway renders; submitters only run the result);
- ``security``: ``interlink-nats nats-config`` (permissions, credentials, development TLS);
- ``ops``: running processes: /healthz and /metrics without a web stack, a supervised local nats-server.

What gateway, submitters and controller all use (subjects, quantities, name rules, the job-directory
layout, NATS connection options, clocks, signals) is in ``interlink_nats.kernel``, below this layer.
"""
