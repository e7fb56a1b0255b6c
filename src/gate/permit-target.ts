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

// scheme, optional userinfo (dropped), host[:port], rest (path, query, fragment).
const URL_PARTS = /^([a-z][a-z0-9+.-]*:)\/\/(?:[^/?#@]*@)?([^/?#]*)(.*)$/is;

/** Reduces undici's dispatch options or `{ method, origin: url }` to a {@link PermitTarget}. */
export function permitTarget(info: PermitRequestInfo | undefined | null): PermitTarget | undefined {
  if (info === undefined || info === null || typeof info !== 'object') return undefined;
  const rawMethod = info.method;
  const method =
    typeof rawMethod === 'string' && rawMethod !== '' ? rawMethod.toUpperCase() : 'GET';
  const rawOrigin = info.origin;
  const url =
    rawOrigin instanceof URL ? rawOrigin.href : typeof rawOrigin === 'string' ? rawOrigin : '';
  const parts = URL_PARTS.exec(url);
  const origin = parts === null ? '' : `${parts[1]!.toLowerCase()}//${parts[2]!.toLowerCase()}`;
  const rawPath = typeof info.path === 'string' ? info.path : parts === null ? '' : parts[3]!;
  return { method, origin, path: withoutQuery(rawPath) };
}

function withoutQuery(path: string): string {
  let end = path.length;
  const query = path.indexOf('?');
  if (query !== -1) end = query;
  const fragment = path.indexOf('#');
  if (fragment !== -1 && fragment < end) end = fragment;
  return end === path.length ? path : path.slice(0, end);
}
