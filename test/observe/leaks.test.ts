import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { inspect } from 'node:util';
import { Registry } from 'prom-client';
import { request, fetch as undiciFetch } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import {
  detectLeaks,
  HostLimiter,
  type LeakMessage,
  type LeakSuspect,
  limitFetch,
  limitHosts,
  Semaphore,
} from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';
import { metricValue } from './prom-text.js';

const loop = useLoopback();

// maxHold 2 s: long enough that a loaded machine still gets the response headers in time.
function setup(maxHold = 2000) {
  const limiter = new HostLimiter({
    partners: [{ name: 'partner', hosts: [loop.partner.origin], limit: 2, maxHold }],
    unknownHosts: 'reject',
  });
  const registry = new Registry();
  registerMetrics(limiter, { registry });
  return { limiter, gate: limiter.gate('partner')!, registry };
}

/** Big enough that an unread body backs up into the socket instead of ending the response. */
const UNREAD = '/ok?size=4000000&token=secret';

describe('leak detector', () => {
  it('names an unread body as a leak suspect, once, and then sees it taken back as a hold timeout', async () => {
    const { limiter, gate, registry } = setup();
    const reported: LeakSuspect[] = [];
    const published: LeakMessage[] = [];
    const onMessage = (message: unknown) => published.push(message as LeakMessage);
    subscribe('hostgate:leak', onMessage);
    const detector = detectLeaks(limiter, {
      leakWarnAfter: 150,
      sweepEvery: 20,
      onLeak: (suspect) => reported.push(suspect),
    });
    try {
      const dispatcher = loop.agent.compose(limitHosts(limiter));
      const leaked = await request(`${loop.partner.url}${UNREAD}`, { dispatcher }); // never read
      expect(gate.held).toBe(1);
      // Young (or alive) permits are no suspects: any listed has been quiet past the threshold.
      for (const s of limiter.leaks()) expect(s.quietMs).toBeGreaterThanOrEqual(150);

      await vi.waitFor(() => expect(reported).toHaveLength(1), { timeout: 10_000, interval: 10 });
      const suspect = reported[0]!;
      expect(suspect).toMatchObject({
        partner: 'partner',
        method: 'GET',
        origin: loop.partner.origin,
        path: '/ok', // the query (a token) is never reported
        leakWarnAfterMs: 150,
      });
      expect(suspect.heldMs).toBeGreaterThanOrEqual(150);
      expect(suspect.acquiredFrom).toContain('leaks.test.ts');
      expect(suspect.acquiredFrom).not.toContain('/src/http/');
      expect(published.map((m) => m.suspect)).toEqual([suspect]);
      // On a loaded machine a late chunk can make it look alive again for a moment: a suspect
      // now is this one or none, and the gauge says the same.
      const now = limiter.leaks().map((s) => s.path);
      expect(now).toEqual(now.length === 0 ? [] : ['/ok']);
      expect(
        metricValue(await registry.metrics(), 'hostgate_leak_suspects', { partner: 'partner' }),
      ).toBeLessThanOrEqual(1);

      await new Promise((resolve) => setTimeout(resolve, 100)); // more sweeps: still one report
      expect(reported).toHaveLength(1);

      // maxHold (2 s without progress) takes it back: a hold timeout, not a client abort.
      await vi.waitFor(() => expect(gate.stats().holdTimeouts).toBe(1), {
        timeout: 10_000,
        interval: 10,
      });
      expect(gate.held).toBe(0);
      expect(limiter.leaks()).toEqual([]);
      const text = await registry.metrics();
      expect(metricValue(text, 'hostgate_leak_suspects', { partner: 'partner' })).toBe(0);
      expect(metricValue(text, 'hostgate_hold_timeouts_total', { partner: 'partner' })).toBe(1);
      expect(
        metricValue(text, 'hostgate_aborted_total', { partner: 'partner', stage: 'in_flight' }),
      ).toBe(0);
      expectInvariant(gate);
      await leaked.body.dump().catch(() => {});
    } finally {
      detector.close();
      unsubscribe('hostgate:leak', onMessage);
    }
  });

  it('names the limitFetch caller and the request of an unread fetch body', async () => {
    const { limiter, gate } = setup(5000);
    const detector = detectLeaks(limiter, { leakWarnAfter: 100, sweepEvery: 20 });
    try {
      const limited = limitFetch(undiciFetch, limiter);
      const res = await limited(`${loop.partner.url}${UNREAD}`, {
        method: 'GET',
        dispatcher: loop.agent,
      });
      expect(res.status).toBe(200);
      await vi.waitFor(() => expect(detector.leaks()).toHaveLength(1), {
        timeout: 10_000,
        interval: 10,
      });
      const [suspect] = limiter.leaks();
      expect(suspect).toMatchObject({
        partner: 'partner',
        method: 'GET',
        origin: loop.partner.origin,
        path: '/ok',
      });
      expect(suspect!.acquiredFrom).toContain('leaks.test.ts');
      await res.body?.cancel();
      expect(gate.held).toBe(0);
      expect(limiter.leaks()).toEqual([]);
    } finally {
      detector.close();
    }
  });

  it('captures no stack unless a detector traces the gate, and stops when it closes', () => {
    const gate = new Semaphore({ limit: 2, maxHold: 1000, name: 'g' });
    const untraced = gate.tryAcquire()!;
    expect(untraced.acquiredFrom).toBeUndefined();
    const detector = detectLeaks(gate, { sweepEvery: 1000 });
    expect(gate.traceAcquires).toBe(true);
    const traced = gate.tryAcquire()!;
    expect(traced.acquiredFrom?.stack).toContain('leaks.test.ts');
    detector.close();
    expect(gate.traceAcquires).toBe(false);
    untraced.release();
    traced.release();
    expect(gate.tryAcquire()!.acquiredFrom).toBeUndefined();
    const withoutStacks = detectLeaks(gate, { stacks: false, sweepEvery: 1000 });
    expect(gate.traceAcquires).toBe(false);
    withoutStacks.close();
  });

  it('lists suspects without a detector, from maxHold / 2 without progress, oldest first', () => {
    let now = 0;
    const gate = new Semaphore({ limit: 3, maxHold: 1000, name: 'g', now: () => now });
    const a = gate.tryAcquire()!;
    now = 200;
    const b = gate.tryAcquire()!;
    now = 450;
    gate.tryAcquire();
    expect(gate.leakWarnAfter).toBe(500);
    const limiter = { gates: () => new Map([['g', gate]]) };
    now = 600;
    expect(detectLeaksList(limiter)).toEqual([600]);
    now = 720;
    expect(detectLeaksList(limiter)).toEqual([720, 520]);
    a.release();
    expect(detectLeaksList(limiter)).toEqual([520]);
    b.noteProgress(); // alive again: no longer a suspect
    expect(detectLeaksList(limiter)).toEqual([]);
  });

  it('item 7: leak reports carry no secrets: plain data, no query, header or body', async () => {
    const { limiter, gate } = setup(5000);
    const reported: LeakSuspect[] = [];
    const published: unknown[] = [];
    const onMessage = (message: unknown) => published.push((message as LeakMessage).suspect);
    subscribe('hostgate:leak', onMessage);
    const detector = detectLeaks(limiter, {
      leakWarnAfter: 100,
      sweepEvery: 20,
      onLeak: (suspect) => reported.push(suspect),
    });
    try {
      const dispatcher = loop.agent.compose(limitHosts(limiter));
      const viaRequest = await request(`${loop.partner.url}${UNREAD}&api_key=k1`, {
        dispatcher,
        headers: { authorization: 'Bearer s3cr3t-header' },
      });
      const limited = limitFetch(undiciFetch, limiter);
      const viaFetch = await limited(`${loop.partner.url}${UNREAD}&api_key=k2`, {
        dispatcher: loop.agent,
        headers: { authorization: 'Bearer s3cr3t-fetch' },
      });
      await vi.waitFor(() => expect(reported).toHaveLength(2), { timeout: 10_000, interval: 10 });
      const reports = [reported, published, limiter.leaks(), detector.leaks()];
      for (const report of reports) {
        const json = JSON.stringify(report); // plain data: no cycle, no live permit
        const shown = inspect(report, { depth: 10, showHidden: true });
        for (const text of [json, shown]) {
          for (const secret of ['secret', 'api_key', 's3cr3t', 'Bearer', 'pw@', 'user:']) {
            expect(text).not.toContain(secret);
          }
        }
      }
      for (const suspect of limiter.leaks()) {
        expect(Object.keys(suspect).sort()).toEqual([
          'acquiredFrom',
          'heldMs',
          'leakWarnAfterMs',
          'method',
          'origin',
          'partner',
          'path',
          'quietMs',
        ]);
        expect(suspect).toMatchObject({ method: 'GET', path: '/ok', origin: loop.partner.origin });
      }
      // The permits themselves keep no more than the report shows.
      for (const permit of gate.holders()) {
        expect(inspect(permit.request)).not.toMatch(/secret|api_key|Bearer|s3cr3t/);
      }
      await viaRequest.body.dump().catch(() => {});
      await viaFetch.body?.cancel();
    } finally {
      detector.close();
      unsubscribe('hostgate:leak', onMessage);
    }
  });

  it('item 7: a permit keeps method, origin and path only, whatever it is given', () => {
    const gate = new Semaphore({ limit: 1 });
    const permit = gate.tryAcquire()!;
    permit.request = { method: 'post', origin: 'HTTPS://user:pw@API.x.com:8443/v1/a?token=t#f' };
    expect(permit.request).toEqual({
      method: 'POST',
      origin: 'https://api.x.com:8443',
      path: '/v1/a',
    });
    const dispatchOptions = {
      origin: new URL('https://api.x.com'),
      path: '/v2/b?api_key=k',
      method: 'GET',
      headers: { authorization: 'Bearer t' },
      body: 'secret body',
    };
    permit.request = dispatchOptions;
    expect(permit.request).toEqual({ method: 'GET', origin: 'https://api.x.com', path: '/v2/b' });
    permit.request = undefined;
    expect(permit.request).toBeUndefined();
    permit.release();
  });

  it('rejects bad options with a TypeError naming them', () => {
    const gate = new Semaphore({ limit: 1 });
    expect(() => detectLeaks(gate, { leakWarnAfter: -1 })).toThrow(/leakWarnAfter/);
    expect(() => detectLeaks(gate, { onLeak: 'x' as never })).toThrow(/onLeak/);
    expect(() => detectLeaks(gate, { stacks: 1 as never })).toThrow(/stacks/);
    expect(() => detectLeaks(gate, { every: 1 } as never)).toThrow(/unknown option "every"/);
    expect(() => detectLeaks({} as never)).toThrow(TypeError);
  });
});

function detectLeaksList(limiter: { gates(): Map<string, Semaphore> }) {
  const detector = detectLeaks(limiter, { sweepEvery: 1000 });
  try {
    return detector.leaks().map((s) => s.heldMs);
  } finally {
    detector.close();
  }
}
