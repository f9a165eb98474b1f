/** The client of the animfleet HTTP API, on the platform's `fetch` (Node 20+): no dependencies. */

import * as core from "./core.js";
import { RequestRefused, WaitTimeout } from "./errors.js";
import type {
  BatchInput,
  BatchResult,
  Job,
  JobEvent,
  JobInput,
  JobPage,
  JobStatus,
  JobLog,
  DeletedJob,
  Models,
  PresignedUpload,
  Regions,
  StoredUpload,
  Usage,
} from "./types.js";
import { isTerminal, isTerminalEvent } from "./types.js";

/** A variable of Node's environment; undefined where there is none (a browser) or it is empty. */
function fromEnvironment(name: string): string | undefined {
  const environment = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  return environment?.[name] || undefined;
}

export interface AnimfleetOptions {
  /** The gateway, e.g. `https://api.example.com` or `http://127.0.0.1:8000`; default `$ANIMFLEET_URL`. */
  baseUrl?: string;
  /** An API key from `animfleet keys create --tenant T`, sent as `Authorization: Bearer`; default `$ANIMFLEET_API_KEY`. */
  apiKey?: string;
  /** Per request (a `Prefer: wait` request gets its wait on top). Default 90 s. */
  timeoutMs?: number;
  /** 429 and 503 answers are retried after their `Retry-After`, at most this many times. */
  maxRetries?: number;
  /** ...and while the pauses of one call add up to at most this. Default 120 s. */
  retryBudgetMs?: number;
  /** Another `fetch` (a proxy agent, a test double); the global one by default. */
  fetch?: typeof fetch;
  /** A submitted image given as bytes larger than this is uploaded first ({@link
   * Animfleet.upload}) and sent as its key, not inlined as base64. Default 1 MiB. */
  uploadOverBytes?: number;
}

export interface SubmitOptions {
  /** The same key with the same body returns the same job; generated per call when absent. */
  idempotencyKey?: string;
  /** Answer once the job finished or after this many seconds (at most 60). */
  waitS?: number;
  signal?: AbortSignal;
}

export interface ListFilters {
  status?: JobStatus;
  /** Unix seconds, exclusive. */
  createdAfter?: number;
  createdBefore?: number;
  cursor?: string;
  /** Jobs per page (1-100, default 20). */
  limit?: number;
}

interface CallOptions {
  body?: unknown;
  /** Sent as is, with its own content type, instead of a JSON `body`. */
  raw?: { bytes: Uint8Array; contentType: string };
  headers?: Record<string, string>;
  query?: Record<string, string | number | undefined>;
  waitS?: number;
  signal?: AbortSignal;
}

/**
 * `new Animfleet({ baseUrl, apiKey })`: submit, follow, cancel, list, download. Without them it
 * reads `ANIMFLEET_URL` and `ANIMFLEET_API_KEY` (`animfleet local up` prints both as one
 * `export` line); no URL either way throws.
 *
 * 429 and 503 answers are retried after their `Retry-After` (with jitter), up to `maxRetries`
 * times within `retryBudgetMs`; every submit carries an idempotency key, so a retry never
 * makes a second job.
 */
export class Animfleet {
  readonly baseUrl: string;
  readonly maxRetries: number;
  readonly retryBudgetMs: number;
  readonly timeoutMs: number;
  readonly uploadOverBytes: number;
  private readonly apiKey: string | undefined;
  private readonly fetch: typeof fetch;

  constructor(options: AnimfleetOptions = {}) {
    const baseUrl = options.baseUrl || fromEnvironment("ANIMFLEET_URL");
    if (!baseUrl) {
      throw new Error("no gateway URL: pass baseUrl or set ANIMFLEET_URL (e.g. http://127.0.0.1:8000)");
    }
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.apiKey = options.apiKey || fromEnvironment("ANIMFLEET_API_KEY");
    this.timeoutMs = options.timeoutMs ?? 90_000;
    this.maxRetries = options.maxRetries ?? 5;
    this.retryBudgetMs = options.retryBudgetMs ?? 120_000;
    this.fetch = options.fetch ?? globalThis.fetch;
    this.uploadOverBytes = options.uploadOverBytes ?? 2 ** 20;
  }

  /** Enqueue a job; `job` is the API's body (`frames`, `size`, `seed`, `model`, `webhook`...). */
  async submit(job: JobInput, options: SubmitOptions = {}): Promise<Job> {
    const key = options.idempotencyKey ?? core.newIdempotencyKey();
    if (job.image instanceof Uint8Array && job.image.byteLength > this.uploadOverBytes) {
      const stored = await this.upload(job.image, { signal: options.signal });
      job = { ...job, image: stored.key };
    }
    return this.call<Job>("POST", "/v1/jobs", {
      body: core.jobBody(job),
      headers: { "Idempotency-Key": key, ...core.preferWait(options.waitS) },
      waitS: options.waitS,
      signal: options.signal,
    });
  }

  /** Enqueue a job under an id of your choosing (1-64 of `A-Za-z0-9_-`): idempotent by id, the
   * same id with another body is refused (409 `idempotency_conflict`, field `id`). */
  put(jobId: string, job: JobInput, options: Omit<SubmitOptions, "idempotencyKey"> = {}): Promise<Job> {
    return this.call<Job>("PUT", `/v1/jobs/${encodeURIComponent(jobId)}`, {
      body: core.jobBody(job),
      headers: core.preferWait(options.waitS),
      waitS: options.waitS,
      signal: options.signal,
    });
  }

  /** Up to 500 jobs in one request; results in order, each with its job or its error. */
  async submitMany(jobs: BatchInput[], options: { signal?: AbortSignal } = {}): Promise<BatchResult[]> {
    const body = { jobs: jobs.map(core.batchItem) };
    type Answer = { results: BatchResult[] };
    const answer = await this.call<Answer>("POST", "/v1/jobs/batch", { body, ...options });
    return answer.results;
  }

  /** The job; with `waitS`, once terminal or after that many seconds (at most 60). */
  get(jobId: string, options: { waitS?: number; signal?: AbortSignal } = {}): Promise<Job> {
    return this.call<Job>("GET", `/v1/jobs/${encodeURIComponent(jobId)}`, {
      headers: core.preferWait(options.waitS),
      ...options,
    });
  }

  /** The job once terminal, by long polls (`Prefer: wait`) or by its event stream
   * (`via: "events"`); {@link WaitTimeout} after `timeoutS` (default 300). */
  async wait(
    jobId: string,
    options: { timeoutS?: number; via?: "poll" | "events"; signal?: AbortSignal } = {},
  ): Promise<Job> {
    const timeoutS = options.timeoutS ?? 300;
    const deadline = Date.now() + timeoutS * 1000;
    const late = (status: string): WaitTimeout =>
      new WaitTimeout(`job ${jobId} still ${status} after ${timeoutS} s`);
    if (options.via === "events") {
      const timer = AbortSignal.timeout(timeoutS * 1000);
      const signal = options.signal ? AbortSignal.any([options.signal, timer]) : timer;
      let status = "queued";
      try {
        for await (const event of this.events(jobId, { signal })) {
          if (event.event !== "log") {
            status = event.data.status;
          }
          if (isTerminalEvent(event)) {
            return event.data;
          }
        }
      } catch (error) {
        if (timer.aborted && !options.signal?.aborted) {
          throw late(status);
        }
        throw error;
      } // the stream kept dropping before the end: poll for the rest of the time
    }
    for (;;) {
      const remainingS = (deadline - Date.now()) / 1000;
      const waitS = Math.max(1, Math.min(remainingS, core.MAX_PREFER_WAIT_S));
      const job = await this.get(jobId, { waitS, signal: options.signal });
      if (isTerminal(job)) {
        return job;
      }
      if (Date.now() >= deadline) {
        throw late(job.status);
      }
    }
  }

  /**
   * The job's live events (`queued`, `started`, `progress`, then its terminal state carrying
   * the job), ending after the terminal one. A dropped connection is resumed after the last
   * event seen (`Last-Event-ID`), up to `maxRetries` times. With `logs: true`, also the
   * job's log lines as `log` events (a resumed stream sends them again).
   */
  async *events(
    jobId: string,
    options: { lastEventId?: string; logs?: boolean; signal?: AbortSignal } = {},
  ): AsyncGenerator<JobEvent, void, undefined> {
    const parser = new core.EventParser(options.lastEventId ?? null);
    for (let attempt = 0; attempt <= this.maxRetries; attempt++) {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      if (parser.lastId) {
        headers["Last-Event-ID"] = parser.lastId;
      }
      const response = await this.send("GET", `/v1/jobs/${encodeURIComponent(jobId)}/events`, {
        headers,
        query: { logs: options.logs ? "true" : undefined },
        signal: options.signal,
      });
      if (!response.ok || response.body === null) {
        await core.checked(response);
        return;
      }
      try {
        for await (const line of core.lines(response.body)) {
          const event = parser.feed(line);
          if (event !== null) {
            yield event;
            if (isTerminalEvent(event)) {
              return;
            }
          }
        }
      } catch (error) {
        if (options.signal?.aborted) {
          throw error;
        }
        // the connection dropped: resume after the last event seen
      } finally {
        await response.body.cancel().catch(() => undefined);
      }
    }
  }

  /** A queued job never starts; a running one stops at its next denoising step. */
  cancel(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Job> {
    return this.call<Job>("POST", `/v1/jobs/${encodeURIComponent(jobId)}/cancel`, options);
  }

  /** One page of your jobs, newest first; pass `next_cursor` as `cursor` for the next. */
  list(filters: ListFilters = {}, options: { signal?: AbortSignal } = {}): Promise<JobPage> {
    const query = {
      status: filters.status,
      created_after: filters.createdAfter,
      created_before: filters.createdBefore,
      cursor: filters.cursor,
      limit: filters.limit,
    };
    return this.call<JobPage>("GET", "/v1/jobs", { query, ...options });
  }

  /** Every job matching `filters`, newest first, page after page. */
  async *iterJobs(filters: Omit<ListFilters, "cursor"> = {}): AsyncGenerator<Job, void, undefined> {
    let cursor: string | undefined;
    do {
      const page = await this.list({ ...filters, cursor });
      yield* page.jobs;
      cursor = page.next_cursor ?? undefined;
    } while (cursor);
  }

  /** The job's MP4, from its signed output URL read afresh (the API key is not sent there). */
  async download(job: Job | string, options: { signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const current = await this.get(typeof job === "string" ? job : job.id, options);
    const url = current.output?.url;
    if (!url) {
      throw new Error(`job ${current.id} has no output to download (status ${current.status})`);
    }
    const signal = this.signal(options.signal);
    const response = await this.fetch(url, { signal });
    if (!response.ok) {
      throw new Error(`download of job ${current.id}: HTTP ${response.status}`);
    }
    return new Uint8Array(await response.arrayBuffer());
  }

  /**
   * Put an image (PNG, JPEG or WebP, at most 10 MiB) in the region's storage once; the
   * answer's `key` is usable as a job's `image`, `mask` or an add-on's `image`, by your
   * tenant only. The bytes go straight to storage through a presigned upload; a region whose
   * storage cannot sign one takes them itself (`POST /v1/uploads/direct`).
   */
  async upload(image: Uint8Array, options: { signal?: AbortSignal } = {}): Promise<StoredUpload> {
    const contentType = core.imageType(image);
    let ticket: PresignedUpload;
    try {
      ticket = await this.call<PresignedUpload>("POST", "/v1/uploads", {
        body: { content_type: contentType },
        ...options,
      });
    } catch (error) {
      if (error instanceof RequestRefused && error.code === "presign_unsupported") {
        const raw = { bytes: image, contentType };
        return this.call<StoredUpload>("POST", "/v1/uploads/direct", { raw, ...options });
      }
      throw error;
    }
    const form = new FormData();
    for (const [name, value] of Object.entries(ticket.fields)) {
      form.append(name, value);
    }
    form.append("file", new Blob([image], { type: contentType }), "upload");
    const signal = this.signal(options.signal);
    const response = await this.fetch(ticket.url, { method: "POST", body: form, signal });
    if (!response.ok) {
      const detail = (await response.text()).slice(0, 300);
      throw new Error(`upload to storage refused: HTTP ${response.status} ${detail}`);
    }
    return { key: ticket.key, content_type: contentType, bytes: image.byteLength };
  }

  /** What the fleet's processes logged about the job, oldest first (at `level` or above). */
  logs(
    jobId: string,
    options: { level?: "debug" | "info" | "warning" | "error"; signal?: AbortSignal } = {},
  ): Promise<JobLog> {
    const query = { level: options.level };
    const path = `/v1/jobs/${encodeURIComponent(jobId)}/logs`;
    return this.call<JobLog>("GET", path, { query, signal: options.signal });
  }

  /** Erase the job (canceled first if not ended): outputs, its uploads, record and log. It
   * then answers 410 `deleted`, and so does a retried submit with its idempotency key. */
  delete(jobId: string, options: { signal?: AbortSignal } = {}): Promise<DeletedJob> {
    return this.call<DeletedJob>("DELETE", `/v1/jobs/${encodeURIComponent(jobId)}`, options);
  }

  /** Your use by day (UTC): jobs by outcome, GPU-seconds, frames x pixels, output bytes,
   * deletions; `from` and `to` as YYYY-MM-DD (default: the last 30 days). */
  usage(
    range: { from?: string; to?: string } = {},
    options: { signal?: AbortSignal } = {},
  ): Promise<Usage> {
    return this.call<Usage>("GET", "/v1/usage", { query: { ...range }, ...options });
  }

  /** The region's deployments and versions: what a job's `model` takes. */
  models(options: { signal?: AbortSignal } = {}): Promise<Models> {
    return this.call<Models>("GET", "/v1/models", options);
  }

  /** Per region: live and busy workers, queued jobs, backlog. */
  regions(options: { signal?: AbortSignal } = {}): Promise<Regions> {
    return this.call<Regions>("GET", "/v1/regions", options);
  }

  /** One API call: retried on 429/503 after `Retry-After`, then its JSON or its error. */
  private async call<T>(method: string, path: string, options: CallOptions = {}): Promise<T> {
    let pausedMs = 0;
    for (let attempt = 0; ; attempt++) {
      const response = await this.send(method, path, options);
      if (core.RETRY_STATUSES.has(response.status) && attempt < this.maxRetries) {
        const pauseMs = core.jittered(core.retryAfterS(response)) * 1000;
        if (pausedMs + pauseMs <= this.retryBudgetMs) {
          await response.body?.cancel();
          await core.sleep(pauseMs, options.signal);
          pausedMs += pauseMs;
          continue;
        }
      }
      return core.checked<T>(response);
    }
  }

  private send(method: string, path: string, options: CallOptions): Promise<Response> {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) {
        url.searchParams.set(name, String(value));
      }
    }
    const headers: Record<string, string> = { "User-Agent": core.USER_AGENT, ...options.headers };
    if (this.apiKey) {
      headers["Authorization"] = `Bearer ${this.apiKey}`;
    }
    let body: string | Uint8Array | undefined;
    if (options.raw !== undefined) {
      headers["Content-Type"] = options.raw.contentType;
      body = options.raw.bytes;
    } else if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.body);
    }
    // An event stream lives as long as its job: only the caller's signal ends it.
    const streaming = path.endsWith("/events");
    const signal = streaming ? options.signal : this.signal(options.signal, options.waitS);
    return this.fetch(url, { method, headers, body, signal });
  }

  private signal(caller: AbortSignal | undefined, waitS = 0): AbortSignal {
    const timer = AbortSignal.timeout(this.timeoutMs + waitS * 1000);
    return caller ? AbortSignal.any([caller, timer]) : timer;
  }
}
