"""The service layer.

- ``rpc``: RPC over NATS for the generated services;
- ``gateway``: the interLink plugin HTTP app;
- ``scripts``: pod → job script building;
- ``security``: ``interlink-nats nats-config`` (permissions, credentials, development TLS);
- the events stream and a nats-server supervisor.

What gateway, submitters and controller all use (subjects, quantities, name rules, the job-directory
layout, NATS connection options) is in ``interlink_nats.kernel``, below this layer.
"""
