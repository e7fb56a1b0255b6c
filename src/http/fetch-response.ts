/** The Response limitFetch hands back: the original's status, headers and identity, our body. */

/** What limitFetch relies on in a response; both Node's and undici's `Response` fit. */
export interface ResponseLike {
  readonly body: ReadableStream<Uint8Array> | null;
  readonly status: number;
  readonly statusText: string;
  readonly headers: unknown;
  readonly url: string;
  readonly redirected: boolean;
  readonly type: string;
  clone(): ResponseLike;
}

type ResponseConstructor = new (
  body: ReadableStream<Uint8Array>,
  init: { status: number; statusText: string; headers: unknown },
) => ResponseLike;

export type InitLike = { signal?: AbortSignal | null } & Record<string, unknown>;
export type CallableFetch = (input: unknown, init?: InitLike) => Promise<ResponseLike>;

/** Statuses whose responses cannot carry a body (`new Response(body, { status })` throws). */
export const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** A Response like `response` whose body is `body`; see limitFetch's notes. */
export function rebuild(response: ResponseLike, body: ReadableStream<Uint8Array>): ResponseLike {
  const Ctor = (
    response instanceof Response || typeof response.constructor !== 'function'
      ? Response
      : response.constructor
  ) as ResponseConstructor;
  const wrapped = new Ctor(body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
  keepIdentity(wrapped, response.url, response.redirected, response.type);
  return wrapped;
}

/** `url`, `redirected` and `type` cannot be passed to the constructor: own properties instead. */
function keepIdentity(target: ResponseLike, url: string, redirected: boolean, type: string): void {
  const clone = Object.getPrototypeOf(target).clone as (this: ResponseLike) => ResponseLike;
  Object.defineProperties(target, {
    url: { value: url, configurable: true },
    redirected: { value: redirected, configurable: true },
    type: { value: type, configurable: true },
    clone: {
      value: function cloneKeepingIdentity(this: ResponseLike): ResponseLike {
        const copy = clone.call(this);
        keepIdentity(copy, url, redirected, type);
        return copy;
      },
      configurable: true,
      writable: true,
    },
  });
}
