"""The gateway: interLink's plugin HTTP API in front of the pools.

- ``wire``: pure parsing of interLink request bodies and building of its reply shapes.
- ``routing``: which pool a pod goes to (pure).
- ``store``: pod records and last statuses (memory, mirrored to redis).
- ``pools``: BuildConfigs and resource reports per pool (announcements, ``Describe``).
- ``events``: the durable JetStream consumer that keeps statuses current.
- ``app``: the Starlette app wiring the above to HTTP.
"""
