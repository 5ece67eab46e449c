"""The service layer: RPC over NATS (``rpc``), the gateway HTTP app (``gateway``) and pod → script building (``scripts``)."""
