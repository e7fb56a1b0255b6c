/** Origin normalisation and host patterns: the keys every gate lookup is made of. */

import { describe } from '../common/options.js';

const DEFAULT_PORTS: Record<string, string> = { 'http:': '80', 'https:': '443' };

/**
 * `https://api.x.com:443`: lower-case host, no trailing dot, explicit port, IPv6 in brackets,
 * an IPv4-mapped IPv6 address as its IPv4 address (see {@link hostKey}).
 */
export function originKey(url: URL): string {
  return `${url.protocol}//${hostKey(url.hostname)}:${url.port || DEFAULT_PORTS[url.protocol]}`;
}

/** Parses a URL or origin handed to a gate lookup; throws a TypeError for anything unusable. */
export function parseTarget(target: string | URL): URL {
  let url: URL;
  if (target instanceof URL) url = target;
  else if (typeof target === 'string') {
    try {
      url = new URL(target);
    } catch {
      throw new TypeError(
        `invalid URL ${JSON.stringify(redactUrl(target))}: expected an absolute http(s) URL`,
      );
    }
  } else {
    throw new TypeError(`expected a URL or an origin string, got ${describe(target)}`);
  }
  if (DEFAULT_PORTS[url.protocol] === undefined) {
    const shown = redactUrl(String(target));
    // "alice:" is the protocol of `alice:TOKEN@host`: named only when the URL shows it too.
    const protocol = shown.toLowerCase().startsWith(url.protocol)
      ? ` ${JSON.stringify(url.protocol)}`
      : '';
    throw new TypeError(
      `unsupported protocol${protocol} in ${JSON.stringify(shown)}: hostgate limits http: and https:`,
    );
  }
  return url;
}

/**
 * A URL as an error message may show it (user-supplied URLs carry tokens): the userinfo, up
 * to the authority's last `@`, becomes `…@`, and the query and fragment `…`. Works on text no
 * parser accepts too. Without `//` after its scheme, `alice:TOKEN@host` has no scheme but a
 * userinfo, as a person meant it.
 */
export function redactUrl(text: string): string {
  let end = text.length;
  for (const mark of ['?', '#']) {
    const at = text.indexOf(mark);
    if (at !== -1 && at < end) end = at;
  }
  let shown = text.slice(0, end);
  const scheme = /^[a-z][a-z0-9+.-]*:[/\\]{2}/i.exec(shown);
  const start = scheme === null ? 0 : scheme[0].length;
  const slash = shown.slice(start).search(/[/\\]/);
  const authorityEnd = slash === -1 ? shown.length : start + slash;
  const at = shown.lastIndexOf('@', authorityEnd - 1);
  if (at >= start) shown = `${shown.slice(0, start)}…${shown.slice(at)}`;
  return end < text.length ? `${shown}…` : shown;
}

/**
 * The key of a WHATWG hostname: one key per host that needs no DNS to tell apart. The parser
 * has already lower-cased it and folded every IPv4 form (`127.1`, `2130706433`, `0x7f.0.0.1`
 * are `127.0.0.1`) and every IPv6 spelling (compressed, in brackets). Left to fold here: the
 * trailing dot (`api.x.com.`) and an IPv4-mapped IPv6 address (`[::ffff:127.0.0.1]`, which the
 * parser writes `[::ffff:7f00:1]`): a socket to it reaches the IPv4 address itself. Names are
 * never resolved: `localhost` is not `127.0.0.1` here (docs/gates.md, "Aliases").
 */
export function hostKey(hostname: string): string {
  const host = hostname.endsWith('.') ? hostname.slice(0, -1) : hostname;
  if (!host.startsWith('[::ffff:')) return host;
  const mapped = IPV4_MAPPED.exec(host);
  if (mapped === null) return host;
  const high = Number.parseInt(mapped[1]!, 16);
  const low = Number.parseInt(mapped[2]!, 16);
  return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
}

/** `[::ffff:7f00:1]`: the WHATWG serialisation of an IPv4-mapped address (always compressed). */
const IPV4_MAPPED = /^\[::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})\]$/;

/**
 * Hosts that are one machine although no parser can tell: the loopback names (`localhost`,
 * `*.localhost`, which resolvers map to `127.0.0.1` or `::1`) and those two addresses.
 * `undefined` for anything else (`127.0.0.2` is another address). Used only to warn (a rule
 * for `127.0.0.1` does not cap `localhost`), never to fold.
 */
export function aliasFamily(host: string): string | undefined {
  if (host === 'localhost' || host.endsWith('.localhost')) return 'loopback';
  if (host === '127.0.0.1' || host === '[::1]') return 'loopback';
  return undefined;
}

export type HostPattern =
  | { kind: 'origin'; key: string; host: string; text: string }
  | { kind: 'host'; host: string; text: string }
  | { kind: 'wildcard'; suffix: string; text: string };

/**
 * A rule's host entry: an origin (`https://api.x.com:8443`), a hostname (`api.x.com`, any
 * scheme and port) or a wildcard (`*.x.com`, any subdomain of x.com but not x.com itself).
 */
export function parseHostPattern(where: string, text: unknown): HostPattern {
  if (typeof text !== 'string' || text.trim() === '') {
    throw new TypeError(`${where}: a host must be a non-empty string, got ${describe(text)}`);
  }
  const raw = text.trim();
  if (raw.includes('://')) {
    let url: URL;
    try {
      url = parseTarget(raw);
    } catch (error) {
      throw new TypeError(`${where}: ${(error as Error).message}`);
    }
    if (
      (url.pathname !== '/' && url.pathname !== '') ||
      url.search ||
      url.hash ||
      url.username ||
      url.password
    ) {
      throw new TypeError(
        `${where}: host ${JSON.stringify(raw)} must be an origin (scheme://host[:port]) without path, query or credentials`,
      );
    }
    if (hasEmptyLabel(url.hostname)) {
      throw new TypeError(`${where}: host ${JSON.stringify(raw)} has an empty label`);
    }
    return { kind: 'origin', key: originKey(url), host: hostKey(url.hostname), text: raw };
  }
  const wildcard = raw.startsWith('*.');
  const name = wildcard ? raw.slice(2) : raw;
  if (name.includes('*')) {
    throw new TypeError(
      `${where}: host ${JSON.stringify(raw)}: a wildcard may only be a leading "*." (like *.x.com)`,
    );
  }
  // A bare IPv6 literal (::1) gets its brackets; anything else with a colon names a port.
  const isBareIpv6 = !name.startsWith('[') && name.split(':').length > 2;
  const hostText = isBareIpv6 ? `[${name}]` : name;
  const namesPort = /:[^\]]*$/.test(hostText);
  let url: URL;
  try {
    url = new URL(`http://${hostText}`);
  } catch {
    throw new TypeError(`${where}: host ${JSON.stringify(raw)} is not a valid hostname`);
  }
  if (namesPort || url.pathname !== '/' || url.search || url.hash || url.username) {
    throw new TypeError(
      `${where}: host ${JSON.stringify(raw)} must be a bare hostname; to name a port, give an origin like https://${name}`,
    );
  }
  if (hasEmptyLabel(url.hostname)) {
    throw new TypeError(
      `${where}: host ${JSON.stringify(raw)} has an empty label; for x.com and its subdomains list both "x.com" and "*.x.com"`,
    );
  }
  const host = hostKey(url.hostname);
  if (wildcard) return { kind: 'wildcard', suffix: `.${host}`, text: raw };
  return { kind: 'host', host, text: raw };
}

/** An empty label (".x.com", "x..com") names no reachable host: a rule that never matches. */
function hasEmptyLabel(hostname: string): boolean {
  return hostname.startsWith('.') || hostname.includes('..');
}
