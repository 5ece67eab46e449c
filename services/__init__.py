"""The service layer.

- ``rpc``: RPC over NATS for the generated services;
- ``gateway``: the interLink plugin HTTP app;
- ``scripts``: pod → job script building;
- shared helpers: subjects, quantities, the events stream, NATS connections, a nats-server supervisor.
"""
