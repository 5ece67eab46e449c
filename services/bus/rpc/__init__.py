"""RPC over core NATS for the generated betterproto2 services (client stubs and ServiceBase classes unmodified).

What belongs here: the transport only (subjects, headers, deadlines, flow control, discovery).
No business logic and no protobuf message knowledge beyond ``SerializeToString``/``FromString``.

Wire convention (the contract for other languages, with examples tested byte for byte: docs/rpc.md)
---------------------------------------------------------------------------------------------------
- Subject: the gRPC route with ``/`` → ``.`` plus the pool, e.g.
  ``interlink_nats.v1.SubmitterService.Submit.<pool>`` (``kernel.subjects.route_to_subject``);
  servers subscribe with queue group = pool, so each call reaches exactly one submitter of its pool.
- Request: the protobuf bytes, with a reply subject. Headers only when needed:
  ``Rpc-Timeout`` (seconds left until the caller's deadline; the server cancels its handler then),
  ``Rpc-Window`` on stream requests (the most the client wants ahead; the server uses the smaller)
  and the call metadata (``-bin`` keys base64). Metadata keys starting with ``Rpc-`` are refused.
- Unary reply: the protobuf bytes with no headers, or an empty body with ``Rpc-Status`` (gRPC code)
  and ``Rpc-Message`` (never ``Rpc-End``), also for a request rejected before its handler; the
  client raises ``grpclib.exceptions.GRPCError(Status(code), message)``.
  Unexpected handler exceptions are logged on the server and sent as UNKNOWN "internal error".
- No responders (nats-server's ``Status: 503``) → ``GRPCError(UNAVAILABLE, "no submitter of pool 'x'
  answered")``; a client-side timeout → DEADLINE_EXCEEDED; other NATS failures → UNAVAILABLE.
- Server stream, all to the client's own inbox, in order:
  1. open: empty body, headers ``Rpc-Control: <subject>`` and ``Rpc-Window: <n>`` (always, also
     when the request is rejected before the handler);
  2. data: protobuf bytes, never any headers;
  3. end marker: empty body, ``Rpc-End: 1`` plus ``Rpc-Status``/``Rpc-Message`` (errors raised
     mid-stream arrive here, after the items already sent).
  Credit flow control: the server sends at most ``window`` data messages beyond the client's last
  ack, then waits. The client publishes ``Rpc-Ack: <total consumed>`` to the control subject each
  half window as the caller consumes items, so a slow reader is never overrun and nothing is
  dropped. ``Rpc-Cancel: 1`` there (sent when the caller stops iterating early or its deadline
  passes) cancels the handler. Data is published with ``reply=<control>``, so if the client's
  inbox disappears nats-server bounces a 503 there and the handler is cancelled too; a client
  that stops acking is given up after the server's idle timeout.
- Discovery: each ``RpcServer`` answers ``$SRV.PING|INFO|STATS`` (also ``.<name>`` and
  ``.<name>.<id>``) per the NATS micro spec, name ``interlink-submitter``, metadata ``pool``.
"""

from .calls import ServerCall, current_call
from .channel import NatsChannel, StreamCall, UnaryCall, submitter_client
from .micro import EndpointStats, MicroResponder
from .protocol import (
    ACK,
    CANCEL,
    CONTROL,
    END,
    MESSAGE,
    STATUS,
    TIMEOUT,
    WINDOW,
)
from .server import SERVICE_NAME, RpcServer, Servable

__all__ = [
    "ACK",
    "CANCEL",
    "CONTROL",
    "END",
    "MESSAGE",
    "SERVICE_NAME",
    "STATUS",
    "TIMEOUT",
    "WINDOW",
    "EndpointStats",
    "MicroResponder",
    "NatsChannel",
    "RpcServer",
    "Servable",
    "ServerCall",
    "StreamCall",
    "UnaryCall",
    "current_call",
    "submitter_client",
]
