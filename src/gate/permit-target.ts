/**
 * What a permit tells about its request, for leak reports: method, origin and path. A permit
 * reduces what it was given when first read, so no query string, credentials, header or body
 * is ever handed out.
 */

/** What a permit was taken for: the HTTP layers attach it (`permit.request`) for leak reports. */
export interface PermitRequestInfo {
  /** HTTP method; `GET` when absent. */
  readonly method?: string | undefined;
  /** An origin (`https://api.x.com`) or a whole URL; the query is never reported. */
  readonly origin?: string | URL | null | undefined;
  /** Path (and query) under `origin`, when `origin` is only an origin (undici's dispatch options). */
  readonly path?: string | null | undefined;
}

/** A permit's request as leak reports show it: plain strings, no query. */
export interface PermitTarget {
  readonly method: string;
  /** `scheme://host[:port]`, without credentials; `''` when the request named none. */
  readonly origin: string;
  /** The path without query or fragment; `''` when unknown. */
  readonly path: string;
}

/**
 * Reduces undici's dispatch options or `{ method, origin: url }` to a {@link PermitTarget}.
 * The origin comes from the WHATWG URL parser, as the request's own host does: userinfo ends
 * at the last `@` (`http://a@b:TOKEN@host/` is host `host`), so no part of a credential is
 * ever taken for the host, and a string no parser accepts reports no origin at all.
 */
export function permitTarget(info: PermitRequestInfo | undefined | null): PermitTarget | undefined {
  if (info === undefined || info === null || typeof info !== 'object') return undefined;
  const rawMethod = info.method;
  const method =
    typeof rawMethod === 'string' && rawMethod !== '' ? rawMethod.toUpperCase() : 'GET';
  const rawOrigin = info.origin;
  const url = rawOrigin instanceof URL ? rawOrigin : parseUrl(rawOrigin);
  // `host` is hostname[:port] without userinfo; `origin` would be "null" for other schemes.
  const origin = url === undefined || url.host === '' ? '' : `${url.protocol}//${url.host}`;
  const rawPath = typeof info.path === 'string' ? info.path : url === undefined ? '' : url.pathname;
  return { method, origin, path: withoutQuery(rawPath) };
}

function parseUrl(text: unknown): URL | undefined {
  if (typeof text !== 'string' || text === '') return undefined;
  try {
    return new URL(text);
  } catch {
    return undefined;
  }
}

function withoutQuery(path: string): string {
  let end = path.length;
  const query = path.indexOf('?');
  if (query !== -1) end = query;
  const fragment = path.indexOf('#');
  if (fragment !== -1 && fragment < end) end = fragment;
  return end === path.length ? path : path.slice(0, end);
}
