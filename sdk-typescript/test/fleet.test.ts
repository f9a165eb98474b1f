/** The client against a real local fleet (gateway with API keys, a GPU worker, S3 storage):
 * `tests/sdk/test_typescript_sdk.py` starts one and sets the variables read below. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  Animfleet,
  type Job,
  type JobEvent,
  type JobInput,
  RequestRefused,
  isTerminal,
} from "@animfleet/sdk";

const { ANIMFLEET_URL, ANIMFLEET_API_KEY, ANIMFLEET_TEST_IMAGE, ANIMFLEET_TEST_IMAGE_KEY } = process.env;
const skip =
  ANIMFLEET_URL && ANIMFLEET_API_KEY && ANIMFLEET_TEST_IMAGE && ANIMFLEET_TEST_IMAGE_KEY
    ? false
    : "ANIMFLEET_URL, ANIMFLEET_API_KEY, ANIMFLEET_TEST_IMAGE(_KEY) unset: no fleet to test against";

describe("against a local fleet", { skip }, () => {
  const api = new Animfleet({ baseUrl: ANIMFLEET_URL ?? "", apiKey: ANIMFLEET_API_KEY ?? "" });
  const png = skip ? new Uint8Array() : readFileSync(ANIMFLEET_TEST_IMAGE ?? "");
  const small = (prompt: string, extra: Partial<JobInput> = {}): JobInput => ({
    image: png,
    prompt,
    size: 32,
    frames: 4,
    ...extra,
  });
  const unique = (): string => crypto.randomUUID().slice(0, 8);

  test("bytes submitted, waited for by polling, and the MP4 downloaded", async () => {
    const job = await api.submit(small("pan left slowly", { seed: 1 }));
    assert.match(job.id, /\S/);
    assert.ok(["queued", "running", "succeeded"].includes(job.status));
    const done = await api.wait(job.id, { timeoutS: 120 });
    assert.equal(done.status, "succeeded", JSON.stringify(done.error));
    assert.ok(done.output?.url?.startsWith("http"));
    const mp4 = await api.download(done);
    assert.equal(mp4.byteLength, done.output?.bytes);
    const box = Buffer.from(mp4.subarray(4, 8)).toString("latin1");
    assert.equal(box, "ftyp", "an MP4 starts with its ftyp box");
  });

  describe("an image by URL and by storage key", () => {
    const server = createServer((_, response) => {
      response.writeHead(200, { "content-type": "image/png" });
      response.end(png);
    });
    before(() => new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve)));
    after(() => server.close());

    test("each makes a job that succeeds", async () => {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/input.png`;
      const byUrl = await api.submit({ ...small("zoom in"), image: url });
      const byKey = await api.submit({ ...small("zoom out"), image: ANIMFLEET_TEST_IMAGE_KEY ?? "" });
      for (const job of [byUrl, byKey]) {
        const done = await api.wait(job.id, { timeoutS: 120, via: "events" });
        assert.equal(done.status, "succeeded", JSON.stringify(done.error));
      }
    });
  });

  test("the same idempotency key gives the same job; with another body, 409 on that header", async () => {
    const idempotencyKey = `ts-${unique()}`;
    const first = await api.submit(small("tilt up"), { idempotencyKey });
    const again = await api.submit(small("tilt up"), { idempotencyKey });
    assert.equal(again.id, first.id);
    const other = await api.submit(small("tilt up"));
    assert.notEqual(other.id, first.id, "a key is generated per call");
    await assert.rejects(api.submit(small("tilt down"), { idempotencyKey }), (error: unknown) => {
      assert.ok(error instanceof RequestRefused);
      assert.equal(error.status, 409);
      assert.equal(error.code, "idempotency_conflict");
      assert.equal(error.field, "Idempotency-Key");
      return true;
    });
    await Promise.all([first, other].map((job) => api.wait(job.id, { timeoutS: 120 })));
  });

  test("PUT under a client-chosen id is idempotent by id", async () => {
    const id = `ts-put-${unique()}`;
    const job = await api.put(id, small("pan right"));
    assert.equal(job.id, id);
    assert.equal((await api.put(id, small("pan right"))).id, id);
    await assert.rejects(api.put(id, small("pan up")), (error: unknown) => {
      assert.ok(error instanceof RequestRefused);
      assert.equal(error.status, 409);
      assert.equal(error.field, "id");
      return true;
    });
    assert.equal((await api.wait(id, { timeoutS: 120 })).status, "succeeded");
  });

  test("a refused request names its field; a wrong key is a 401", async () => {
    await assert.rejects(api.submit(small("pan", { frames: 1 })), (error: unknown) => {
      assert.ok(error instanceof RequestRefused);
      assert.equal(error.status, 422);
      assert.equal(error.code, "invalid_input");
      assert.equal(error.field, "frames");
      assert.match(error.apiMessage, /^frames: /);
      return true;
    });
    const missing = { name: "RequestRefused", status: 404, code: "not_found" };
    await assert.rejects(api.get(`no-such-job-${unique()}`), missing);
    const stranger = new Animfleet({ baseUrl: ANIMFLEET_URL ?? "", apiKey: "af_0000000000000000_wrong" });
    await assert.rejects(stranger.list(), { name: "RequestRefused", status: 401 });
  });

  test("events arrive in order and end with the terminal job", async () => {
    const job = await api.submit(small("orbit slowly"));
    const seen: JobEvent[] = [];
    for await (const event of api.events(job.id)) {
      seen.push(event);
    }
    const names = seen.map((event) => event.event);
    assert.equal(names.at(-1), "succeeded", names.join(" "));
    assert.equal(names.filter((name) => isTerminal(name as Job["status"])).length, 1);
    const started = names.indexOf("started");
    assert.ok(started >= 0 && names.slice(0, started).every((name) => name === "queued"), names.join(" "));
    const steps = seen.flatMap((event) => (event.event === "progress" ? [event.data.step] : []));
    assert.ok(steps.length > 0);
    assert.deepEqual(steps, steps.map((_, index) => index + 1), "each step once, in order");
    const last = seen.at(-1);
    assert.ok(last?.event === "succeeded" && last.data.id === job.id && last.data.output?.url);
  });

  test("a batch answers per item, in order, with its job or its error", async () => {
    const results = await api.submitMany([
      small("pan left"),
      { ...small("pan right"), image: "data:image/png;base64,bm90IGFuIGltYWdl" },
      { ...small("zoom in"), idempotency_key: `ts-batch-${unique()}` },
    ]);
    assert.deepEqual(results.map((result) => result.status), [202, 422, 202]);
    assert.equal(results[1]?.error?.field, "image");
    for (const result of [results[0], results[2]]) {
      const done = await api.wait(result?.job?.id ?? "", { timeoutS: 120 });
      assert.equal(done.status, "succeeded");
    }
  });

  test("list pages through every job, newest first, with a cursor", async () => {
    const results = await api.submitMany([small("a"), small("b"), small("c")]);
    const submitted = results.map((result) => result.job?.id ?? "");
    const first = await api.list({ limit: 2 });
    assert.equal(first.jobs.length, 2);
    assert.ok(first.next_cursor, "more than one page");
    const listed: Job[] = [];
    for await (const job of api.iterJobs({ limit: 2 })) {
      listed.push(job);
    }
    const ids = listed.map((job) => job.id);
    assert.equal(new Set(ids).size, ids.length, "no job twice");
    for (const id of submitted) {
      assert.ok(ids.includes(id), `${id} listed`);
    }
    const times = listed.map((job) => job.created_at);
    assert.deepEqual(times, [...times].sort((a, b) => b - a), "newest first");
    await Promise.all(submitted.map((id) => api.wait(id, { timeoutS: 120 })));
  });

  test("cancel: a queued job never starts, a running one stops", async () => {
    // A long job holds the only worker (steps are what a cancel interrupts), so the next waits.
    const long = await api.submit(small("shake", { size: 128, frames: 32, steps: 100 }));
    for await (const event of api.events(long.id)) {
      if (event.event === "started" || isTerminal(event.event as Job["status"])) {
        break;
      }
    }
    const queued = await api.submit(small("pan"));
    const canceled = await api.cancel(queued.id);
    assert.equal(canceled.status, "canceled");
    assert.equal((await api.get(queued.id)).started_at, null);
    await api.cancel(long.id);
    const stopped = await api.wait(long.id, { timeoutS: 120 });
    assert.equal(stopped.status, "canceled");
  });

  test("bytes past uploadOverBytes are uploaded first and sent as their key", async () => {
    const called: string[] = [];
    const uploading = new Animfleet({
      baseUrl: ANIMFLEET_URL ?? "",
      apiKey: ANIMFLEET_API_KEY ?? "",
      uploadOverBytes: 0,
      fetch: (input, init) => {
        called.push(`${init?.method ?? "GET"} ${String(input)}`);
        return fetch(input, init);
      },
    });
    const job = await uploading.submit(small("sway"));
    assert.ok(called[0]?.endsWith("/v1/uploads"), called.join(", "));
    assert.ok(called[1]?.startsWith("POST ") && !called[1].startsWith(`POST ${ANIMFLEET_URL}`), "to storage");
    assert.ok(called[2]?.endsWith("/v1/jobs"), called.join(", "));
    const done = await uploading.wait(job.id, { timeoutS: 120 });
    assert.equal(done.status, "succeeded", JSON.stringify(done.error));
  });

  test("upload, submit by key, its log, delete, and usage shows it", async () => {
    const upload = await api.upload(png);
    assert.match(upload.key, /^inputs\/uploads\//);
    const job = await api.submit({ ...small("drift"), image: upload.key });
    const logged: string[] = [];
    for await (const event of api.events(job.id, { logs: true })) {
      if (event.event === "log") {
        logged.push(event.data.event);
      }
    }
    assert.ok(logged.includes("job.submitted"), logged.join(","));
    const done = await api.wait(job.id, { timeoutS: 120 });
    assert.equal(done.status, "succeeded", JSON.stringify(done.error));
    const log = await api.logs(job.id);
    assert.ok(log.lines.some((line) => line.event === "job.submitted"));
    const deleted = await api.delete(job.id);
    assert.equal(deleted.status, "succeeded");
    await assert.rejects(api.get(job.id), (error: unknown) => {
      assert.ok(error instanceof RequestRefused);
      assert.equal(error.status, 410);
      assert.equal(error.code, "deleted");
      return true;
    });
    // The region's sweeper rolls usage up about every second.
    const deadline = Date.now() + 30_000;
    let usage = await api.usage();
    while ((usage.total.deleted ?? 0) < 1 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      usage = await api.usage();
    }
    assert.ok((usage.total.deleted ?? 0) >= 1, JSON.stringify(usage.total));
    assert.ok((usage.total.jobs?.["succeeded"] ?? 0) >= 1);
  });
});
