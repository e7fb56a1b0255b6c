import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import http from 'node:http';
import https from 'node:https';
import { afterEach, beforeEach } from 'vitest';
import type { ReleaseMessage, ReleaseReason } from '../../src/gate/diagnostics.js';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { type GateOptions, HostLimiter, LimitedHttpAgent } from '../../src/index.js';
import { type Partner, startPartner } from './partner.js';

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

/** What {@link useGatedAgent} gives each test. */
export interface GatedAgentSetup {
  readonly partner: Partner;
  /** A keep-alive `http.Agent` inside a LimitedHttpAgent whose partner `p` is the partner. */
  readonly agent: LimitedHttpAgent;
  readonly gate: Semaphore;
}

/**
 * A counting partner and a LimitedHttpAgent for it (partner `p`, `rule`), new for each test and
 * closed after it (the agent's sockets first).
 */
export function useGatedAgent(
  rule: Omit<GateOptions, 'limit'> & { limit: number },
): GatedAgentSetup {
  let current: { partner: Partner; inner: http.Agent; agent: LimitedHttpAgent } | undefined;
  beforeEach(async () => {
    const partner = await startPartner();
    const inner = new http.Agent({ keepAlive: true });
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [partner.origin], ...rule }],
    });
    current = { partner, inner, agent: new LimitedHttpAgent(inner, limiter) };
  });
  afterEach(async () => {
    current?.inner.destroy();
    await current?.partner.close();
    current = undefined;
  });
  const now = () => {
    if (current === undefined) throw new Error('useGatedAgent: no test is running');
    return current;
  };
  return {
    get partner() {
      return now().partner;
    },
    get agent() {
      return now().agent;
    },
    get gate() {
      return now().agent.limiter.gate('p')!;
    },
  };
}
