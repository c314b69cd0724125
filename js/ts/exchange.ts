/**
 * The store's round trips, posted from JavaScript: the core runs a call until it needs Redis and
 * hands over the `/pipeline` body it would send; this posts it with `fetch` and hands the reply
 * back, until the call is over (the core's src/exchange.rs). The await stays here, where a
 * promise costs nothing extra, and the core is only ever called synchronously.
 *
 * @packageDocumentation
 */

import type { Core } from "./core.js";
import type { FetchLike } from "./index.js";

/** Posts calls' bodies to one store. */
export class Exchange {
  readonly #core: Core;
  readonly #fetch: FetchLike;
  readonly #url: string;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;

  constructor(core: Core, fetch: FetchLike) {
    this.#core = core;
    this.#fetch = fetch;
    this.#url = core.pipelineUrl();
    this.#timeoutMs = core.timeoutMs();
    this.#headers = {
      Authorization: core.authorization(),
      "Content-Type": "application/json",
      // Results in base64, as the official clients ask: any bytes survive JSON.
      "Upstash-Encoding": "base64",
    };
  }

  /** Runs the core's call `call` to its end: its outcome's JSON, or the core's error thrown. */
  async run(call: number): Promise<string> {
    const core = this.#core;
    try {
      let body = core.advance(call);
      while (body !== undefined) {
        // One post, then what the core makes of its reply or its failure: the next body to
        // post, or `undefined` when the call is over. The time allowed covers the response
        // and its body.
        const controller = new AbortController();
        let timedOut = false;
        const timer = setTimeout(() => {
          timedOut = true;
          controller.abort();
        }, this.#timeoutMs);
        let status: unknown;
        let text: unknown;
        try {
          const response = await this.#fetch(this.#url, {
            method: "POST",
            headers: this.#headers,
            body,
            signal: controller.signal,
          });
          status = response.status;
          text = await response.text();
        } catch (e) {
          const name = (e as { name?: unknown } | null)?.name;
          body = core.fail(call, timedOut || name === "TimeoutError", describe(e));
          continue;
        } finally {
          clearTimeout(timer);
        }
        if (typeof status !== "number" || !(status >= 100 && status < 1000)) {
          body = core.fail(call, false, "fetch answered something without a status");
        } else if (typeof text !== "string") {
          body = core.fail(call, false, "the response's text() is not a string");
        } else {
          body = core.reply(call, status, text);
        }
      }
    } catch (e) {
      // Not the store's failure (those are the call's to answer): free the call, then throw.
      try {
        core.finish(call);
      } catch {
        // The call's own outcome does not matter any more.
      }
      throw e;
    }
    return core.finish(call);
  }
}

/** A failure as one line: its `message` (and `cause`'s, which Node's fetch fills with the
 * socket's error), else its text. */
function describe(e: unknown): string {
  const field = (v: unknown, k: string): string | undefined => {
    const value = (v as Record<string, unknown> | null | undefined)?.[k];
    return typeof value === "string" && value !== "" ? value : undefined;
  };
  const message = field(e, "message") ?? (typeof e === "string" ? e : undefined);
  const cause = (e as { cause?: unknown } | null | undefined)?.cause;
  const because = field(cause, "message") ?? field(cause, "code");
  if (message !== undefined) return because !== undefined ? `${message} (${because})` : message;
  return String(e);
}
