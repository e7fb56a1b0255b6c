/**
 * limitFetch follows redirects itself, one permit per hop: each hop is sent with
 * `redirect: 'manual'` under the gate of the URL it goes to, so a redirect that reaches a
 * partner holds that partner's permit whatever URL the chain started at (issue 36: an unnamed
 * URL answering 302 to a partner ran the partner hop under the unnamed origin's gate). The
 * steps are the Fetch standard's "HTTP-redirect fetch", as undici implements them.
 */
import { redactUrl } from '../partners/origin.js';
import type { InitLike, ResponseLike } from './fetch-response.js';

/** The Fetch standard's redirect statuses. */
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** The Fetch standard's bound on a chain: the 21st redirect is a network error. */
export const MAX_REDIRECTS = 20;
/** Dropped when a redirect turns the request into a GET without a body. */
const BODY_HEADERS = ['content-encoding', 'content-language', 'content-location', 'content-type'];
/** Dropped on a redirect to another origin (undici: the standard's list plus cookie and host). */
const CREDENTIAL_HEADERS = ['authorization', 'proxy-authorization', 'cookie', 'host'];

/** A status fetch would follow (with a `Location`). */
export function isRedirect(status: number): boolean {
  return REDIRECT_STATUSES.has(status);
}

/** The caller's redirect mode: `init.redirect`, else the Request's, else `'follow'`. */
export function redirectMode(input: unknown, init: InitLike | undefined): unknown {
  if (init?.redirect !== undefined) return init.redirect;
  if (typeof input === 'object' && input !== null && !(input instanceof URL)) {
    const mode = (input as { redirect?: unknown }).redirect;
    if (mode !== undefined) return mode;
  }
  return 'follow';
}

/** A hop to send: its URL and the init for it (with `redirect: 'manual'`). */
export interface Hop {
  url: URL;
  init: InitLike;
}

/**
 * The next hop after `response` to the request `(url, init)`, or `undefined` when `response` is
 * not a redirect to follow (not a redirect status, or no `Location`). Throws fetch's own
 * `TypeError('fetch failed')` for a chain it would refuse: too long, a non-http(s) or
 * malformed location, a body it cannot send again. The caller ends the response's body.
 */
export function nextHop(response: ResponseLike, current: Hop, redirects: number): Hop | undefined {
  if (!REDIRECT_STATUSES.has(response.status)) return undefined;
  const location = headerOf(response.headers, 'location');
  if (location === null) return undefined;
  let url: URL;
  try {
    url = new URL(location, current.url);
  } catch {
    // Not the parser's error as a cause: its `input` and `base` are whole URLs, tokens and all.
    throw fetchFailed(`invalid redirect location ${JSON.stringify(redactUrl(location))}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw fetchFailed(`redirect to ${JSON.stringify(url.protocol)} refused: not http(s)`);
  }
  if (redirects >= MAX_REDIRECTS) throw fetchFailed('redirect count exceeded');
  if (url.hash === '' && current.url.hash !== '') url.hash = current.url.hash;

  const init: InitLike = { ...current.init, redirect: 'manual' };
  const method = String(current.init.method ?? 'GET').toUpperCase();
  const headers = new Headers(current.init.headers as ConstructorParameters<typeof Headers>[0]);
  const status = response.status;
  if (
    (status === 303 && method !== 'GET' && method !== 'HEAD') ||
    ((status === 301 || status === 302) && method === 'POST')
  ) {
    init.method = 'GET';
    init.body = null;
    for (const name of BODY_HEADERS) headers.delete(name);
  } else if (current.init.body != null && !resendable(current.init.body)) {
    throw fetchFailed(`a ${status} redirect must send the body again, and a stream body cannot be`);
  }
  if (url.origin !== current.url.origin) {
    for (const name of CREDENTIAL_HEADERS) headers.delete(name);
  }
  init.headers = headers;
  return { url, init };
}

/**
 * The first hop: the caller's URL and an init that carries what the caller's `Request` said
 * (method, headers, body), for the hops after it. A `Request` with a body is sent as is on the
 * first hop; a redirect that must send the body again then fails, as a stream body does.
 */
export function firstHop(input: unknown, init: InitLike | undefined, url: URL): Hop {
  const out: InitLike = { ...init };
  if (typeof input === 'object' && input !== null && !(input instanceof URL)) {
    const request = input as { method?: unknown; headers?: unknown; body?: unknown };
    out.method ??= request.method;
    out.headers ??= request.headers;
    if (out.body === undefined && request.body != null) out.body = request.body; // a stream
  }
  return { url, init: out };
}

/** What fetch would reject with: `TypeError('fetch failed')` with the reason as its cause. */
function fetchFailed(message: string): TypeError {
  return new TypeError('fetch failed', { cause: new Error(`limitFetch: ${message}`) });
}

/** Bodies fetch can extract again (its "source" is kept): everything but a stream. */
function resendable(body: unknown): boolean {
  return (
    typeof body === 'string' ||
    body instanceof URLSearchParams ||
    body instanceof ArrayBuffer ||
    ArrayBuffer.isView(body) ||
    body instanceof Blob ||
    body instanceof FormData
  );
}

function headerOf(headers: unknown, name: string): string | null {
  const get = (headers as { get?: (name: string) => string | null } | null)?.get;
  return typeof get === 'function' ? get.call(headers, name) : null;
}

/** The response to a followed chain: its `url` is the last hop's, `redirected` true. */
export function markRedirected(response: ResponseLike, url: string): ResponseLike {
  const clone = response.clone;
  Object.defineProperties(response, {
    url: { value: url, configurable: true },
    redirected: { value: true, configurable: true },
    clone: {
      value: function cloneRedirected(this: ResponseLike): ResponseLike {
        return markRedirected(clone.call(this), url);
      },
      configurable: true,
      writable: true,
    },
  });
  return response;
}
