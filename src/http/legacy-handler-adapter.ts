import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { LegacyHandler } from './legacy-limit-handler.js';

type Controller = Dispatcher.DispatchController;
type Headers = Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseStart']>>[2];

/**
 * A callback-API handler (`onConnect`, `onHeaders`, …) seen through the controller API, for an
 * inner dispatcher that takes only the latter: undici 8 refuses the old shape ("invalid
 * onRequestStart method"), and Node's global fetch (its bundled undici 6 or 7) still hands it.
 * hostgate sits between the two, so it translates, as undici 7's WrapHandler did and undici 8's
 * Dispatcher1Wrapper does for its global dispatcher. Headers and trailers go back raw, as the
 * callback API has them; backpressure (`false` from onHeaders/onData) pauses the controller.
 */
export class LegacyHandlerAdapter {
  readonly #handler: LegacyHandler;

  constructor(handler: LegacyHandler) {
    this.#handler = handler;
  }

  onRequestStart(controller: Controller, context: unknown): void {
    this.#handler.onConnect?.((reason) => controller.abort(reason as Error), context as object);
  }

  onRequestUpgrade(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    socket: Duplex,
  ): void {
    this.#handler.onUpgrade?.(statusCode, rawOf(controller?.rawHeaders, headers), socket);
  }

  onResponseStart(
    controller: Controller,
    statusCode: number,
    headers: Headers,
    statusMessage?: string,
  ): void {
    const resume = () => controller.resume();
    const raw = rawOf(controller?.rawHeaders, headers);
    if (this.#handler.onHeaders?.(statusCode, raw, resume, statusMessage ?? '') === false) {
      controller.pause();
    }
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.#handler.onData?.(chunk) === false) controller.pause();
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    const raw = rawOf(controller?.rawTrailers, trailers);
    this.#handler.onComplete?.(raw as unknown as string[]); // raw, as undici passes them
  }

  onResponseError(_controller: Controller | undefined, error: Error): void {
    if (this.#handler.onError === undefined) throw error;
    this.#handler.onError(error);
  }

  onBodySent(chunk: unknown): void {
    this.#handler.onBodySent?.(chunk as Buffer);
  }

  onRequestSent(): void {
    this.#handler.onRequestSent?.();
  }

  onResponseStarted(): void {
    this.#handler.onResponseStarted?.();
  }
}

/** The controller's raw header list, else `[name, value, …]` built from the headers object. */
function rawOf(raw: unknown, headers: Headers | undefined): Buffer[] {
  if (Array.isArray(raw)) return raw as Buffer[];
  const out: Buffer[] = [];
  for (const [name, value] of Object.entries(headers ?? {})) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) {
      out.push(Buffer.from(name), Buffer.from(String(v)));
    }
  }
  return out;
}
