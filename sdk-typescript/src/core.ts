/** What the client's calls share: request bodies, retry pauses, errors, the SSE parser. */

import { ApiError, RequestRefused, TryLater } from "./errors.js";
import type { BatchInput, ImageInput, JobEvent, JobInput, JobRequest } from "./types.js";

export const RETRY_STATUSES: ReadonlySet<number> = new Set([429, 503]);
export const DEFAULT_RETRY_S = 1;
export const MAX_PREFER_WAIT_S = 60;
export const USER_AGENT = "animfleet-sdk-ts/0.1";

/** The image type of `image`'s bytes, by their signature (PNG unless JPEG or WebP). */
export function imageType(image: Uint8Array): "image/png" | "image/jpeg" | "image/webp" {
  if (image[0] === 0xff && image[1] === 0xd8 && image[2] === 0xff) {
    return "image/jpeg";
  }
  if (String.fromCharCode(...image.subarray(0, 4)) === "RIFF") {
    return "image/webp";
  }
  return "image/png";
}

/** A URL, data URI or `inputs/` key as given; bytes as a base64 data URI of their image type. */
export function imageField(image: ImageInput): string {
  if (typeof image === "string") {
    return image;
  }
  const kind = imageType(image);
  const bytes = Buffer.from(image.buffer, image.byteOffset, image.byteLength);
  return `data:${kind};base64,${bytes.toString("base64")}`;
}

/** The API's request body: images encoded, absent options left out. */
export function jobBody(job: JobInput): JobRequest {
  const body: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(job)) {
    if (value !== undefined && value !== null) {
      body[name] = value;
    }
  }
  body["image"] = imageField(job.image);
  if (job.mask != null) {
    body["mask"] = imageField(job.mask);
  }
  if (job.addons != null) {
    body["addons"] = job.addons.map((addon) =>
      addon.image != null ? { ...addon, image: imageField(addon.image) } : addon,
    );
  }
  return body as JobRequest;
}

export function batchItem(job: BatchInput): JobRequest & { idempotency_key: string } {
  return { ...jobBody(job), idempotency_key: job.idempotency_key ?? newIdempotencyKey() };
}

/** Each submit carries one, so the client's retries never create a job twice. */
export function newIdempotencyKey(): string {
  return "sdk-" + crypto.randomUUID().replaceAll("-", "");
}

/** `Retry-After` in seconds (a number or an HTTP date), or the default when absent or unreadable. */
export function retryAfterS(response: Response): number {
  const value = response.headers.get("retry-after");
  if (value === null) {
    return DEFAULT_RETRY_S;
  }
  const seconds = Number(value);
  if (value.trim() !== "" && Number.isFinite(seconds)) {
    return Math.max(0, seconds);
  }
  const date = Date.parse(value);
  return Number.isNaN(date) ? DEFAULT_RETRY_S : Math.max(0, (date - Date.now()) / 1000);
}

/** The pause before a retry: at least what the gateway asked, plus up to 20% so that clients
 * told the same `Retry-After` do not all come back at the same instant. */
export function jittered(seconds: number, random: () => number = Math.random): number {
  return seconds * (1 + 0.2 * random());
}

/** The answer's JSON, or the API's error thrown. */
export async function checked<T>(response: Response): Promise<T> {
  const text = await response.text();
  if (response.ok) {
    return JSON.parse(text) as T;
  }
  throw errorOf(response, text);
}

export function errorOf(response: Response, text: string): ApiError {
  let code = "http_error";
  let message = text.slice(0, 200);
  let field: string | null = null;
  try {
    type Body = { error?: { code?: unknown; message?: unknown; field?: unknown } };
    const error = (JSON.parse(text) as Body).error;
    if (typeof error?.code === "string" && typeof error.message === "string") {
      code = error.code;
      message = error.message;
      field = typeof error.field === "string" ? error.field : null;
    }
  } catch {
    // not JSON: a proxy's page, say; its start is the message
  }
  const wait = response.headers.has("retry-after") ? retryAfterS(response) : null;
  if (RETRY_STATUSES.has(response.status)) {
    return new TryLater(response.status, code, message, field, wait);
  }
  if (response.status < 500) {
    return new RequestRefused(response.status, code, message, field, wait);
  }
  return new ApiError(response.status, code, message, field, wait); // neither side can say more
}

export function preferWait(waitS: number | undefined): Record<string, string> {
  return waitS ? { Prefer: `wait=${Math.min(Math.floor(waitS), MAX_PREFER_WAIT_S)}` } : {};
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Server-Sent Events, one line at a time (comments, i.e. heartbeats, are skipped). */
export class EventParser {
  private fields = new Map<string, string>();

  constructor(public lastId: string | null = null) {}

  feed(line: string): JobEvent | null {
    if (line === "") {
      const fields = this.fields;
      this.fields = new Map();
      const data = fields.get("data");
      if (data === undefined) {
        return null;
      }
      const id = fields.get("id") ?? this.lastId ?? "";
      this.lastId = id;
      return { id, event: fields.get("event") ?? "message", data: JSON.parse(data) } as JobEvent;
    }
    if (line.startsWith(":")) {
      return null;
    }
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) {
      value = value.slice(1);
    }
    const earlier = this.fields.get(name);
    this.fields.set(name, name === "data" && earlier !== undefined ? `${earlier}\n${value}` : value);
    return null;
  }
}

/** The lines of a byte stream, split at `\n`, `\r\n` or `\r` (as SSE allows all three). */
export async function* lines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    pending += decoder.decode(chunk, { stream: true });
    let match: RegExpExecArray | null;
    const separator = /\r\n|\r|\n/g;
    let start = 0;
    while ((match = separator.exec(pending)) !== null) {
      if (match[0] === "\r" && match.index === pending.length - 1) {
        break; // a lone \r at the end may be the first half of \r\n: wait for more
      }
      yield pending.slice(start, match.index);
      start = match.index + match[0].length;
    }
    pending = pending.slice(start);
  }
  pending = (pending + decoder.decode()).replace(/\r$/, "");
  if (pending !== "") {
    yield pending;
  }
}
