"""The gateway: interLink's plugin HTTP API in front of the pools.

- ``wire``: pure parsing of interLink request bodies and building of its reply shapes.
- ``routing``: which pool a pod goes to (pure).
- ``errors``: the gateway's errors and the RPC → HTTP status table (pure).
- ``store``: pod records and last statuses (memory, mirrored to redis).
- ``pools``: BuildConfigs and resource reports per pool (announcements, ``Describe``).
- ``pool_client``: RPC to the pools: a stub per pool, waiting for a pool's submitter, errors mapped.
- ``events``: the durable JetStream consumer that keeps statuses current.
- ``recovery``: rebuilding the pod table from the pools, and the stale-status safety net.
- ``usecases``: create, status, delete, logs: request bytes in, reply data out.
- ``app``: the gateway assembled and started in order.
- ``http_edge``: the Starlette app (middleware: metrics, bearer token, body limit) around it.
- ``server``: NATS and redis connections, uvicorn, graceful stop.
"""
