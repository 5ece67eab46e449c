"""What every process speaks on NATS: RPC for the generated betterproto2 services (``rpc``) and the
JobEvents stream (``events_stream``). Gateway, submitters and controller all build on it; it knows none of them.
"""
