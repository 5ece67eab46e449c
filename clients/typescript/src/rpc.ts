// interlink-nats' RPC wire convention over NATS (docs/rpc.md), for unary calls (what services/rpc does in Python):
// - subject: `interlink_nats.v1.SubmitterService.<Method>.<pool>` (the gRPC route with '/' -> '.', plus the pool);
// - request: the protobuf bytes; `Rpc-Timeout` header = seconds left until the caller's deadline;
// - reply: the protobuf bytes with no headers, or an empty body with `Rpc-Status` (gRPC code) and `Rpc-Message`;
// - nats-server's no-responders (503) means no submitter of that pool is connected: UNAVAILABLE.
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { headers as natsHeaders, type NatsConnection } from "nats";

export const SUBMITTER_SERVICE = "interlink_nats.v1.SubmitterService";
export const STATUS_HEADER = "Rpc-Status";
export const MESSAGE_HEADER = "Rpc-Message";
export const TIMEOUT_HEADER = "Rpc-Timeout";

/** gRPC status codes used in `Rpc-Status` (the subset a caller usually branches on). */
export const Status = { OK: 0, DEADLINE_EXCEEDED: 4, NOT_FOUND: 5, UNIMPLEMENTED: 12, UNAVAILABLE: 14 } as const;

export class RpcError extends Error {
  constructor(readonly code: number, message: string) {
    super(`rpc error ${code}: ${message}`);
    this.name = "RpcError";
  }
}

/** The subject of one method of one pool; pool names are DNS labels, so they are safe NATS tokens. */
export function rpcSubject(method: string, pool: string): string {
  if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(pool)) {
    throw new Error(`invalid pool name ${JSON.stringify(pool)}: must be a DNS label`);
  }
  return `${SUBMITTER_SERVICE}.${method}.${pool}`;
}

/** One unary call: encode, request with a deadline, map the status headers to an RpcError. */
export async function unary<I extends DescMessage, O extends DescMessage>(
  nc: NatsConnection,
  pool: string,
  method: string,
  input: I,
  output: O,
  request: MessageInitShape<I>,
  timeoutMs = 10_000,
): Promise<MessageShape<O>> {
  const h = natsHeaders();
  h.set(TIMEOUT_HEADER, (timeoutMs / 1000).toFixed(3));
  let reply;
  try {
    reply = await nc.request(rpcSubject(method, pool), toBinary(input, create(input, request)), {
      timeout: timeoutMs,
      headers: h,
    });
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === "503") throw new RpcError(Status.UNAVAILABLE, `no submitter of pool '${pool}' answered`);
    if (code === "TIMEOUT") throw new RpcError(Status.DEADLINE_EXCEEDED, "deadline exceeded");
    throw err;
  }
  const status = reply.headers?.get(STATUS_HEADER);
  if (status !== undefined && status !== "" && Number(status) !== Status.OK) {
    throw new RpcError(Number(status), reply.headers?.get(MESSAGE_HEADER) ?? "");
  }
  return fromBinary(output, reply.data);
}
