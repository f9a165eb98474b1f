/** What the client throws: the API's `{"error": {code, message, field}}` with its status. */

export class ApiError extends Error {
  /** HTTP status of the answer. */
  readonly status: number;
  /** The gateway's error code, e.g. `invalid_input`, `not_found`, `backlog_full`. */
  readonly code: string;
  /** The gateway's message, as sent. */
  readonly apiMessage: string;
  /** The request field at fault, when the gateway names one (`frames`, `Idempotency-Key`). */
  readonly field: string | null;
  /** Seconds the gateway asked to wait (`Retry-After`), when it did. */
  readonly retryAfterS: number | null;

  constructor(
    status: number,
    code: string,
    apiMessage: string,
    field: string | null = null,
    retryAfterS: number | null = null,
  ) {
    super(`${status} ${code}: ${apiMessage}`);
    this.name = new.target.name;
    this.status = status;
    this.code = code;
    this.apiMessage = apiMessage;
    this.field = field;
    this.retryAfterS = retryAfterS;
  }
}

/** 4xx but 429: fix the request, the key or the job id first. */
export class RequestRefused extends ApiError {}

/** 429 or 503 after the client's own retries ran out (or would exceed their time budget). */
export class TryLater extends ApiError {}

/** The job was not terminal in the time given. */
export class WaitTimeout extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WaitTimeout";
  }
}
