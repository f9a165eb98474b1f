/** The client against small real HTTP servers on loopback that answer from a script: retries
 * after 429/503 and the event stream's framing and resumption. */

import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";

import { Animfleet, type JobEvent, TryLater } from "@animfleet/sdk";

type Handler = (request: IncomingMessage, response: ServerResponse, index: number) => void;

interface Scripted {
  url: string;
  requests: { headers: IncomingMessage["headers"]; at: number; body: string }[];
}

const servers: Server[] = [];
after(() => servers.forEach((server) => server.close()));

async function serve(handler: Handler): Promise<Scripted> {
  const scripted: Scripted = { url: "", requests: [] };
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString()));
    request.on("end", () => {
      scripted.requests.push({ headers: request.headers, at: performance.now(), body });
      handler(request, response, scripted.requests.length - 1);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  scripted.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return scripted;
}

function json(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  response.writeHead(status, { "content-type": "application/json", ...headers });
  response.end(JSON.stringify(body));
}

const JOB = { id: "job-1", status: "queued", region: "local", home_region: "local", created_at: 1 };
const FULL = { code: "backlog_full", message: "the region's backlog is full" };

test("a 429 is retried after its Retry-After with the same idempotency key", async () => {
  const server = await serve((_, response, index) =>
    index === 0 ? json(response, 429, { error: FULL }, { "Retry-After": "1" }) : json(response, 202, JOB),
  );
  const api = new Animfleet({ baseUrl: server.url, apiKey: "af_test_secret" });
  const job = await api.submit({ image: new Uint8Array([0x89, 0x50, 0x4e, 0x47]), prompt: "pan left" });
  assert.equal(job.id, "job-1");
  assert.equal(server.requests.length, 2);
  const [first, second] = server.requests as [Scripted["requests"][0], Scripted["requests"][0]];
  const key = first.headers["idempotency-key"];
  assert.match(String(key), /^sdk-[0-9a-f]{32}$/);
  assert.equal(second.headers["idempotency-key"], key);
  assert.equal(first.headers["authorization"], "Bearer af_test_secret");
  assert.ok(second.at - first.at >= 1000, `retried after ${second.at - first.at} ms, before Retry-After`);
  assert.ok(second.at - first.at < 1200 + 500, "the jitter adds at most 20%");
  const sent = JSON.parse(first.body) as { image: string; prompt: string };
  assert.equal(sent.image, "data:image/png;base64,iVBORw==");
});

test("503s are retried at most maxRetries times, then TryLater carries the error", async () => {
  const server = await serve((_, response) =>
    json(
      response,
      503,
      { error: { code: "broker_unavailable", message: "retry shortly" } },
      { "Retry-After": "0" },
    ),
  );
  const api = new Animfleet({ baseUrl: server.url, maxRetries: 2 });
  await assert.rejects(api.get("job-1"), (error: unknown) => {
    assert.ok(error instanceof TryLater);
    assert.equal(error.status, 503);
    assert.equal(error.code, "broker_unavailable");
    assert.equal(error.apiMessage, "retry shortly");
    assert.equal(error.retryAfterS, 0);
    return true;
  });
  assert.equal(server.requests.length, 3);
});

test("a Retry-After past the retry budget is not waited for", async () => {
  const server = await serve((_, response) => json(response, 429, { error: FULL }, { "Retry-After": "30" }));
  const api = new Animfleet({ baseUrl: server.url, retryBudgetMs: 5_000 });
  const started = performance.now();
  await assert.rejects(api.submit({ image: "inputs/a.png", prompt: "pan" }), (error: unknown) => {
    assert.ok(error instanceof TryLater);
    assert.equal(error.code, "backlog_full");
    assert.equal(error.retryAfterS, 30);
    return true;
  });
  assert.equal(server.requests.length, 1);
  assert.ok(performance.now() - started < 5_000);
});

test("events are parsed across CRLF framing and heartbeats, and a dropped stream resumes", async () => {
  const terminal = { ...JOB, status: "succeeded" };
  const server = await serve((request, response, index) => {
    response.writeHead(200, { "content-type": "text/event-stream" });
    if (index === 0) {
      response.write(": ping\r\n\r\nid: queued\r\nevent: queued\r\ndata: {\"status\":\"queued\",\r\n");
      response.write("data: \"queued_position\":null}\r\n\r\nid: started\nevent: started\n");
      response.end('data: {"status":"running","started_at":2,"attempt":1}\n\n'); // dropped here
      return;
    }
    assert.equal(request.headers["last-event-id"], "started");
    response.write('id: step-1\nevent: progress\ndata: {"status":"running","step":1,"total":1}\n\n');
    response.end(`id: end\nevent: succeeded\ndata: ${JSON.stringify(terminal)}\n\n`);
  });
  const api = new Animfleet({ baseUrl: server.url });
  const seen: JobEvent[] = [];
  for await (const event of api.events("job-1")) {
    seen.push(event);
  }
  assert.deepEqual(
    seen.map((event) => [event.id, event.event]),
    [["queued", "queued"], ["started", "started"], ["step-1", "progress"], ["end", "succeeded"]],
  );
  assert.deepEqual(seen[3]?.data, terminal);
  assert.equal(server.requests.length, 2);
});

test("without options it reads ANIMFLEET_URL and ANIMFLEET_API_KEY; without a URL it throws", async () => {
  const server = await serve((_request, response) => json(response, 200, { data: [], next_cursor: null }));
  const saved = { url: process.env.ANIMFLEET_URL, key: process.env.ANIMFLEET_API_KEY };
  try {
    delete process.env.ANIMFLEET_URL;
    assert.throws(() => new Animfleet(), /ANIMFLEET_URL/);
    process.env.ANIMFLEET_URL = server.url;
    process.env.ANIMFLEET_API_KEY = "af_0123456789abcdef_from-the-environment";
    await new Animfleet().list();
    assert.equal(server.requests[0]?.headers.authorization, "Bearer af_0123456789abcdef_from-the-environment");
  } finally {
    for (const [name, value] of [["ANIMFLEET_URL", saved.url], ["ANIMFLEET_API_KEY", saved.key]] as const) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  }
});
