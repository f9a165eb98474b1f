/** The TypeScript SDK of animfleet's HTTP API: `import { Animfleet } from "@animfleet/sdk"`. */

export { Animfleet } from "./client.js";
export type { AnimfleetOptions, ListFilters, SubmitOptions } from "./client.js";
export { ApiError, RequestRefused, TryLater, WaitTimeout } from "./errors.js";
export { TERMINAL, isTerminal, isTerminalEvent } from "./types.js";
export type {
  AddonRequest,
  BatchInput,
  BatchResult,
  ErrorBody,
  ImageInput,
  Job,
  JobEvent,
  JobInput,
  JobPage,
  JobRequest,
  JobStatus,
  Models,
  Regions,
  TerminalEvent,
} from "./types.js";
export type { components, paths } from "./schema.js";
