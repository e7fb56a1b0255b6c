import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import http from 'node:http';
import https from 'node:https';
import type { ReleaseMessage, ReleaseReason } from '../../src/gate/diagnostics.js';
import type { Semaphore } from '../../src/gate/semaphore.js';

/** How a node:http request ended, as its caller sees it. */
export type Outcome =
  | { ok: true; status: number; body: string }
  | { ok: false; error: Error; closed: boolean };

/** One request through `agent`: its ClientRequest and how it ended (read to the end). */
export function get(
  url: string,
  agent: http.Agent,
  options: http.RequestOptions = {},
): { req: http.ClientRequest; outcome: Promise<Outcome> } {
  const client = url.startsWith('https:') ? https : http;
  let settle!: (o: Outcome) => void;
  const outcome = new Promise<Outcome>((resolve) => {
    settle = resolve;
  });
  const req = client.get(url, { agent, ...options }, (res) => {
    let body = '';
    res.setEncoding('utf8');
    res.on('data', (chunk: string) => {
      body += chunk;
    });
    res.on('end', () => settle({ ok: true, status: res.statusCode ?? 0, body }));
    res.on('error', (error) => settle({ ok: false, error, closed: true }));
  });
  req.on('error', (error) => {
    req.once('close', () => settle({ ok: false, error, closed: true }));
  });
  return { req, outcome };
}

/** One release of a gate's permit, and whether `req`'s socket was closed by then. */
export interface ReleaseSeen {
  reason: ReleaseReason;
  socketClosed: boolean | undefined;
}

/**
 * Records every release of `gate` with the state of `socketOf()`'s socket at that moment:
 * the teardown policy says a request cancelled in flight gives its permit back only once its
 * socket is closed on our side.
 */
export function watchReleases(
  gate: Semaphore,
  socketOf: () => { destroyed: boolean } | null | undefined,
): { seen: ReleaseSeen[]; stop(): void } {
  const seen: ReleaseSeen[] = [];
  const onRelease = (message: unknown) => {
    const m = message as ReleaseMessage;
    if (m.gate === gate) seen.push({ reason: m.reason, socketClosed: socketOf()?.destroyed });
  };
  subscribe('hostgate:release', onRelease);
  return { seen, stop: () => unsubscribe('hostgate:release', onRelease) };
}
