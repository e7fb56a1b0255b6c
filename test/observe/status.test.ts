import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { PartnerStatus, StatusBody } from '../../middleware/index.js';
import { statusHandler } from '../../middleware/index.js';
import { HostLimiter, Semaphore } from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { metricValue } from './prom-text.js';
import { STALL_AFTER_MS, type StatusScene, startStatusScene } from './status-scene.js';

let scene: StatusScene;

beforeAll(async () => {
  scene = await startStatusScene();
});

afterAll(async () => {
  await scene.close();
});

async function json(): Promise<StatusBody> {
  const res = await fetch(scene.url, { headers: { accept: 'application/json' } });
  expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
  return (await res.json()) as StatusBody;
}

function byName(body: StatusBody): Record<string, PartnerStatus> {
  return Object.fromEntries(body.partners.map((p) => [p.partner, p]));
}

describe('statusHandler', () => {
  it('marks a leak suspect and an exhausted gate without progress, and nothing else', async () => {
    await vi.waitFor(
      async () => {
        const p = byName(await json());
        expect(p.ledger!.state).toBe('leak');
        expect(p.search!.state).toBe('stalled');
      },
      { timeout: 10_000, interval: 25 },
    );
    const body = await json();
    const p = byName(body);
    expect(Object.keys(p)).toEqual(['billing', 'search', 'ledger', 'maps']);
    expect(p.billing).toMatchObject({
      state: 'ok',
      held: 13,
      limit: 20,
      available: 7,
      stalled: false,
    });
    expect(p.search).toMatchObject({ state: 'stalled', held: 4, available: 0, stalled: true });
    expect(p.search!.quietMs).toBeGreaterThanOrEqual(STALL_AFTER_MS);
    expect(p.ledger).toMatchObject({ state: 'leak', held: 1, leakSuspects: 1 });
    // Exhausted and shedding, but its bytes flow: busy, not stalled.
    expect(p.maps).toMatchObject({ state: 'ok', held: 2, available: 0, shedQueueFull: 12 });
    expect(p.maps!.quietMs).toBeLessThan(STALL_AFTER_MS);
    expect(p.maps!.shedPerSecond).toBeGreaterThan(0); // six of them after the first read
    expect(p.billing!.waitP99Ms).toBeLessThanOrEqual(0.1); // five immediate grants
    expect(body.leaks).toHaveLength(1);
    expect(body.leaks[0]).toMatchObject({ partner: 'ledger', method: 'GET', path: '/ok' });
    expect(JSON.stringify(body)).not.toContain('session=abc');
  });

  it('marks an exhausted gate stalled once its responses stop sending bytes', async () => {
    scene.maps.flowing = false;
    try {
      await vi.waitFor(async () => expect(byName(await json()).maps!.state).toBe('stalled'), {
        timeout: 10_000,
        interval: 25,
      });
    } finally {
      scene.maps.flowing = true;
    }
    await vi.waitFor(async () => expect(byName(await json()).maps!.state).toBe('ok'), {
      timeout: 10_000,
      interval: 25,
    });
  });

  it('serves a self-contained HTML page by default, JSON when asked for', async () => {
    const res = await fetch(scene.url, {
      headers: { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' },
    });
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toBe(
      "default-src 'none'; style-src 'unsafe-inline'",
    );
    expect(res.headers.get('cache-control')).toBe('no-store');
    const html = await res.text();
    expect(html).toContain('<tr data-partner="billing" data-state="ok">');
    expect(html).toContain('<tr data-partner="search" data-state="stalled">');
    expect(html).toContain('aria-valuenow="13"');
    expect(html).not.toMatch(/<script|<link|src=|url\(/i);
    const asJson = await fetch(`${scene.url}?format=json`);
    expect(asJson.headers.get('content-type')).toMatch(/^application\/json/);
    const preferred = await fetch(scene.url, {
      headers: { accept: 'text/html;q=0.5, application/json' },
    });
    expect(preferred.headers.get('content-type')).toMatch(/^application\/json/);
  });

  it('escapes partner names and paths in the page', () => {
    const limiter = new HostLimiter({
      partners: [{ name: '<img src=x onerror=alert(1)>', hosts: ['x.example'], limit: 1 }],
    });
    let html = '';
    const res = {
      setHeader() {},
      end(text: string) {
        html = text;
      },
    };
    statusHandler(limiter)({ url: '/', headers: {} } as never, res as never);
    expect(html).toContain('&lt;img src=x onerror=alert(1)&gt;');
    expect(html).not.toContain('<img');
  });

  it('rejects bad options with a TypeError naming them', () => {
    const limiter = new HostLimiter({});
    expect(() => statusHandler(limiter, { refreshSeconds: 0 })).toThrow(/refreshSeconds/);
    expect(() => statusHandler(limiter, { stallAfter: -5 })).toThrow(/stallAfter/);
    expect(() => statusHandler(limiter, { colour: 'red' } as never)).toThrow(
      /unknown option "colour"/,
    );
  });
});

describe('item 8: the first look sees a stall that began before it', () => {
  it('status page and first Prometheus scrape mark a gate exhausted and silent since before', async () => {
    let now = 0;
    const gate = new Semaphore({ limit: 1, name: 'quiet', now: () => now });
    const permit = gate.tryAcquire()!;
    now = 10;
    permit.noteProgress(); // headers arrived, then nothing
    now = 10 + 10_000;
    const page = statusHandler(gate, { stallAfter: 10_000, now: () => now });
    expect(page.body().partners[0]).toMatchObject({ state: 'stalled', quietMs: 10_000 });
    const registry = new Registry();
    registerMetrics(gate, { registry, stallAfter: 10_000, now: () => now });
    expect(metricValue(await registry.metrics(), 'hostgate_stalled', { partner: 'quiet' })).toBe(1);
    permit.release();
  });
});
