/** Friendly names for the bodies of the API, all from the generated `schema.d.ts`. */

import type { components } from "./schema.js";

type Schemas = components["schemas"];

export type Job = Schemas["JobView"];
export type JobStatus = Schemas["JobState"];
export type JobRequest = Schemas["JobRequest"];
export type AddonRequest = Schemas["AddonRequest"];
export type BatchResult = Schemas["BatchResult"];
export type ErrorBody = Schemas["ErrorBody"];
export type JobPage = Schemas["JobList"];
export type Models = Schemas["Models"];
export type Regions = Schemas["Regions"];
export type StoredUpload = Schemas["StoredUpload"];
export type PresignedUpload = Schemas["PresignedUpload"];
export type JobLog = Schemas["JobLog"];
export type LogEntry = Schemas["LogEntry"];
export type DeletedJob = Schemas["DeletedJob"];
export type Usage = Schemas["Usage"];
export type DayUsage = Schemas["DayUsage"];

/** An image as the client takes it: bytes (sent as a base64 data URI), an http(s) URL, a data
 * URI, or the key of an object under `inputs/` in the region's storage. */
export type ImageInput = Uint8Array | string;

/** A job to submit: the API's request body, with images given any way {@link ImageInput} says. */
export type JobInput = Omit<JobRequest, "image" | "mask" | "addons"> & {
  image: ImageInput;
  mask?: ImageInput | null;
  addons?: (Omit<AddonRequest, "image"> & { image?: ImageInput | null })[] | null;
};

/** One job of a batch: a {@link JobInput} with its own idempotency key (one is generated when
 * absent, so a retried batch never makes a job twice). */
export type BatchInput = JobInput & { idempotency_key?: string | null };

export const TERMINAL: ReadonlySet<JobStatus> = new Set<JobStatus>([
  "succeeded",
  "failed",
  "canceled",
  "expired",
]);

/** Whether a job (or a status) is final: succeeded, failed, canceled or expired. */
export function isTerminal(job: Job | JobStatus): boolean {
  return TERMINAL.has(typeof job === "string" ? job : job.status);
}

/** The events of `GET /v1/jobs/{id}/events`, in the order a job lives them. */
export type JobEvent =
  | {
      id: string;
      event: "queued";
      data: { status: "queued"; queue_position: number | null; estimated_start_at?: number | null };
    }
  | { id: string; event: "started"; data: { status: "running"; started_at: number; attempt: number } }
  | { id: string; event: "progress"; data: { status: "running"; step: number; total: number } }
  | { id: string; event: "succeeded" | "failed" | "canceled" | "expired"; data: Job }
  /** One of the job's log lines, as {@link LogEntry}; `id` repeats the last event's. */
  | { id: string; event: "log"; data: LogEntry };

/** The terminal event of a stream: it carries the job, with its output URL. */
export type TerminalEvent = Extract<JobEvent, { data: Job }>;

export function isTerminalEvent(event: JobEvent): event is TerminalEvent {
  return TERMINAL.has(event.event as JobStatus);
}
