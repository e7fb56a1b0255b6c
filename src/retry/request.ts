/** What the retrier needs to know about a fetch call, read from its arguments. */

type HeaderSource = unknown;

export interface CallFacts {
  /** Absolute URL of the call (gate lookup and events). */
  url: string;
  method: string;
  signal: AbortSignal | undefined;
  /** The body can be sent again: none, or bytes held in memory (not a one-shot stream). */
  replayable: boolean;
  hasHeader(name: string): boolean;
}

export interface FetchCall extends CallFacts {
  /** Arguments for one attempt: a `Request` with a body is cloned, so each attempt has one. */
  args(): [unknown, unknown];
}

interface RequestLike {
  url: string;
  method: string;
  headers: HeaderSource;
  signal?: AbortSignal;
  body: unknown;
  clone(): unknown;
}

function isRequestLike(value: unknown): value is RequestLike {
  return (
    typeof value === 'object' &&
    value !== null &&
    !(value instanceof URL) &&
    typeof (value as RequestLike).url === 'string' &&
    typeof (value as RequestLike).method === 'string'
  );
}

/** Reads `fetch(input, init)` arguments; `undefined` when they are not something to retry. */
export function describeFetchCall(input: unknown, init: unknown): FetchCall | undefined {
  const options = (typeof init === 'object' && init !== null ? init : {}) as {
    method?: unknown;
    headers?: HeaderSource;
    signal?: AbortSignal | null;
    body?: unknown;
  };
  let url: string;
  let method: unknown = options.method;
  let headers = options.headers;
  let signal = options.signal ?? undefined;
  let replayable = replayableBody(options.body);
  let request: RequestLike | undefined;
  if (typeof input === 'string') url = input;
  else if (input instanceof URL) url = input.href;
  else if (isRequestLike(input)) {
    request = input;
    url = input.url;
    method ??= input.method;
    headers ??= input.headers;
    signal ??= input.signal;
    if (options.body === undefined && input.body != null) {
      // Each attempt sends a clone; the original keeps an unread copy of the body.
      replayable = typeof input.clone === 'function';
    } else request = undefined;
  } else return undefined;
  if (typeof method !== 'string') method = 'GET';
  return {
    url,
    method: (method as string).toUpperCase(),
    signal,
    replayable,
    hasHeader: (name) => hasHeader(headers, name),
    args: () => [request === undefined ? input : request.clone(), init],
  };
}

/** Strings, bytes, Blobs, forms: fetch can send them again. Streams and iterables it cannot. */
function replayableBody(body: unknown): boolean {
  if (body == null || typeof body !== 'object') return true;
  if (body instanceof ArrayBuffer || ArrayBuffer.isView(body)) return true;
  if (body instanceof URLSearchParams || body instanceof Blob || body instanceof FormData) {
    return true;
  }
  return false;
}

/** Whether `headers` (a Headers, a record or a list of pairs) names `name` (lower-case). */
export function hasHeader(headers: HeaderSource, name: string): boolean {
  if (headers == null || typeof headers !== 'object') return false;
  const has = (headers as { has?: unknown }).has;
  if (typeof has === 'function') return Boolean(has.call(headers, name));
  const entries: Iterable<unknown> = Array.isArray(headers)
    ? headers
    : Object.entries(headers as Record<string, unknown>);
  for (const entry of entries) {
    if (Array.isArray(entry) && typeof entry[0] === 'string' && entry[0].toLowerCase() === name) {
      return true;
    }
  }
  return false;
}
