/** The TypeScript SDK of animfleet's HTTP API: `import { Animfleet } from "@animfleet/sdk"`. */

export { Animfleet } from "./client.js";
export type { AnimfleetOptions, ListFilters, SubmitOptions } from "./client.js";
export { ApiError, RequestRefused, TryLater, WaitTimeout } from "./errors.js";
export { TERMINAL, isTerminal, isTerminalEvent } from "./types.js";
export type {
  AddonRequest,
  BatchInput,
  BatchResult,
  DayUsage,
  DeletedJob,
  ErrorBody,
  ImageInput,
  Job,
  JobEvent,
  JobInput,
  JobLog,
  JobPage,
  JobRequest,
  JobStatus,
  LogEntry,
  Models,
  PresignedUpload,
  Regions,
  StoredUpload,
  TerminalEvent,
  Usage,
} from "./types.js";
export type { components, paths } from "./schema.js";
