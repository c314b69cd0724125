/**
 * The one error the package throws for bad input (and, from `peek` and `reset`, for a failing
 * store): a `code` to switch on, the `path` of what was wrong, and a sentence saying what.
 *
 * `limit()` never throws because the store failed: each limit's fail mode answers instead, and
 * the result's `reason` says so (`failed_open`, `failed_closed`, `fallback`); a store that refuses
 * the limiter (a wrong token) is a misconfiguration, failed closed (`misconfigured_closed`).
 */
export type ErrorCode =
  /** An option of `new Ratelimit(…)` is missing, of the wrong type or invalid. */
  | "invalid_option"
  /** A call named a limit the `Ratelimit` does not have. */
  | "unknown_limit"
  /** A call gave no identifier (or an empty one) for one of the limits. */
  | "missing_identifier"
  /** An identifier is not a string. */
  | "invalid_identifier"
  /** A cost is not a whole number within ±2^52, or names an unknown limit. */
  | "invalid_cost"
  /** Another argument of a call is of the wrong shape. */
  | "invalid_argument"
  /** The store failed a `peek`, a `reset`, a `settle` or a `release`. */
  | "store";

/** What the core reports, before it is thrown. */
interface Reported {
  code: ErrorCode;
  path: string;
  message: string;
  transient?: boolean;
}

/** The package's typed error. */
export class EdgelimitError extends Error {
  /** What kind of mistake. */
  readonly code: ErrorCode;
  /** Where: `limits[1].policy`, `identifiers["per-team"]`, `options.cost`. */
  readonly path: string;
  /** For `code: "store"`: whether the same call may succeed if retried. */
  readonly transient: boolean | undefined;

  /** An error as the core reported it. */
  constructor(reported: Reported) {
    super(`${reported.path}: ${reported.message}`);
    this.name = "EdgelimitError";
    this.code = reported.code;
    this.path = reported.path;
    this.transient = reported.transient;
  }
}

/**
 * Rethrows what the core threw: its JSON reports become an `EdgelimitError`; anything else (a
 * JavaScript `TypeError` from a wrong argument type) is thrown as it is.
 */
export function rethrow(thrown: unknown): never {
  if (typeof thrown === "string" && thrown.startsWith("{")) {
    let reported: Reported | undefined;
    try {
      reported = JSON.parse(thrown) as Reported;
    } catch {
      reported = undefined;
    }
    if (reported && typeof reported.code === "string") throw new EdgelimitError(reported);
  }
  throw thrown;
}
