// Ask one pool to describe itself (BuildConfig + resources), as the controller does, and print it as JSON.
//
//   NATS_URL=tls://nats.example.org:4222 CA_FILE=ca.pem NKEY_SEED_FILE=controller.nk \
//   INBOX_PREFIX=_INBOX.controller POOL=hpc-a npm run describe
//
// Credentials come from `interlink-nats nats-config`: the controller (or gateway) seed file and its private inbox
// prefix (the server only lets an identity subscribe below its own prefix). wss:// needs a WebSocket-capable
// client (nats.ws); this example uses the TCP transport with TLS.
import { readFileSync } from "node:fs";
import { toJson } from "@bufbuild/protobuf";
import { connect, nkeyAuthenticator } from "nats";
import { DescribeRequestSchema, DescribeResponseSchema } from "./gen/interlink_nats/v1/submitter_pb.js";
import { RpcError, unary } from "./rpc.js";

function env(name: string, fallback?: string): string {
  const value = process.env[name] ?? fallback;
  if (value === undefined || value === "") throw new Error(`${name} is not set`);
  return value;
}

async function main(): Promise<number> {
  const url = new URL(env("NATS_URL", "nats://127.0.0.1:4222"));
  const seedFile = process.env.NKEY_SEED_FILE;
  const caFile = process.env.CA_FILE;
  const nc = await connect({
    servers: `${url.hostname}:${url.port || "4222"}`,
    // tls:// (or a CA file) means TLS, verified against the site's CA.
    tls: url.protocol === "tls:" || caFile ? (caFile ? { caFile } : {}) : undefined,
    // The seed is read here and handed to the signer only; it is never printed.
    authenticator: seedFile ? nkeyAuthenticator(new TextEncoder().encode(readFileSync(seedFile, "utf8").trim())) : undefined,
    inboxPrefix: process.env.INBOX_PREFIX || undefined,
    name: "interlink-nats-ts-example",
  });
  try {
    const reply = await unary(nc, env("POOL"), "Describe", DescribeRequestSchema, DescribeResponseSchema, {},
      Number(process.env.TIMEOUT_MS ?? 5000));
    console.log(JSON.stringify(toJson(DescribeResponseSchema, reply)));
    return 0;
  } catch (err) {
    if (err instanceof RpcError) {
      console.error(err.message);
      return 2;
    }
    throw err;
  } finally {
    await nc.close();
  }
}

main().then((code) => process.exit(code), (err) => {
  console.error(err);
  process.exit(1);
});
