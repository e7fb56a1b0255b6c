import { getEventListeners, once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import nock from 'nock';
import { Request as UndiciRequest, fetch as undiciFetch } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  findShedError,
  HostLimiter,
  type HostLimiterOptions,
  limitFetch,
  PermitHoldTimeoutError,
  QueueFullError,
  QueueTimeoutError,
  type Semaphore,
  UnknownHostError,
} from '../../src/index.js';
import { whenIdle } from '../helpers/gate-events.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { released } from '../helpers/until.js';

// nock patches the global fetch as soon as it is imported; only the nock block below turns it
// on. Everything else talks to real loopback servers through the real fetches.
nock.restore();

type Rule = Partial<HostLimiterOptions['partners'] extends (infer R)[] | undefined ? R : never>;
type Init = { signal?: AbortSignal | null; method?: string; redirect?: 'follow' | 'manual' };
type Fetch = (input: string | URL | Request, init?: Init) => Promise<Response>;

function limiterFor(origin: string, rule: Rule = {}) {
  const limiter = new HostLimiter({
    partners: [
      {
        name: 'partner',
        hosts: [origin],
        limit: 20,
        maxQueue: 1000,
        queueTimeout: 10_000,
        ...rule,
      },
    ],
    unknownHosts: 'reject',
  });
  return { limiter, gate: limiter.gate('partner')! };
}

/** The invariant, at any instant: `held + available === limit`, every grant accounted for. */
function expectInvariant(gate: Semaphore) {
  const s = gate.stats();
  expect(s.held).toBeLessThanOrEqual(s.limit);
  expect(s.held + s.available).toBe(s.limit);
  expect(s.held).toBe(s.acquired - s.released); // a maxHold take-back counts as a release
  expect(gate.holders()).toHaveLength(s.held);
  expect(s.doubleReleases).toBe(0);
  if (s.queued > 0) expect(s.available).toBe(0);
}

/**
 * Nothing held, nothing waiting, no permit released twice; waits for the release first (a
 * request that reached the partner returns its permit after teardown, src/http/teardown.ts).
 */
async function expectIdle(gate: Semaphore) {
  expectInvariant(gate);
  await whenIdle(gate);
  expectInvariant(gate);
  const s = gate.stats();
  expect(s.held).toBe(0);
  expect(s.queued).toBe(0);
  expect(s.available).toBe(s.limit);
  expect(s.acquired).toBe(s.released);
}

async function settle(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    return error;
  }
}

/** A fetch whose every call the test answers by hand; it honours its signal like fetch does. */
function scriptedFetch() {
  const calls: {
    input: unknown;
    signal: AbortSignal;
    respond: (response: Response) => void;
    fail: (error: unknown) => void;
  }[] = [];
  const fn = (input: unknown, init?: { signal?: AbortSignal }) =>
    new Promise<Response>((respond, fail) => {
      const signal = init?.signal;
      if (signal === undefined) throw new Error('limitFetch must always pass its own signal');
      if (signal.aborted) return fail(signal.reason);
      signal.addEventListener('abort', () => fail(signal.reason), { once: true });
      calls.push({ input, signal, respond, fail });
    });
  return { fn, calls };
}

/** A response body the test drives: `push`, `end`, `error`; `cancelled` resolves on cancel. */
function scriptedBody() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let onCancel!: (reason: unknown) => void;
  const cancelled = new Promise<unknown>((resolve) => {
    onCancel = resolve;
  });
  const stream = new ReadableStream<Uint8Array>(
    {
      start: (c) => {
        controller = c;
      },
      cancel: (reason) => onCancel(reason),
    },
    { highWaterMark: 0 },
  );
  return {
    stream,
    cancelled,
    push: (text: string) => controller.enqueue(new TextEncoder().encode(text)),
    end: () => controller.close(),
    error: (error: unknown) => controller.error(error),
  };
}

describe('limitFetch over nock (global fetch intercepted below the wrapper)', () => {
  const origin = 'http://billing.test';

  beforeAll(() => {
    nock.activate();
    nock.disableNetConnect();
  });
  afterEach(() => {
    nock.cleanAll();
  });
  afterAll(() => {
    nock.enableNetConnect();
    nock.restore();
  });

  /** Wraps the global fetch as nock has patched it, recording the signal each call gets. */
  function setup(rule: Rule = {}) {
    const { limiter, gate } = limiterFor(origin, { limit: 2, ...rule });
    const patched = globalThis.fetch;
    const signals: AbortSignal[] = [];
    const limited = limitFetch((input: string | URL | Request, init?: RequestInit) => {
      signals.push(init!.signal!);
      return patched(input, init);
    }, limiter);
    return { limiter, gate, limited, signals };
  }

  it('holds the permit until the body has been read, then returns it', async () => {
    nock(origin).get('/invoices').reply(200, 'hello', { 'x-partner': 'billing' });
    const { gate, limited } = setup();
    const res = await limited(`${origin}/invoices`);
    expect(res.status).toBe(200);
    expect(res.statusText).toBe('OK');
    expect(res.headers.get('x-partner')).toBe('billing');
    expect(res.url).toBe(`${origin}/invoices`);
    expect(gate.held).toBe(1); // headers are not the end of the request
    expectInvariant(gate);
    expect(await res.text()).toBe('hello');
    await expectIdle(gate);
    expect(gate.stats().acquired).toBe(1);
  });

  it('returns the permit when the caller cancels the body unread', async () => {
    nock(origin).get('/big').reply(200, 'x'.repeat(100_000));
    const { gate, limited } = setup();
    const res = await limited(`${origin}/big`);
    expect(gate.held).toBe(1);
    await res.body!.cancel();
    await expectIdle(gate);
  });

  it('returns the permit when the request fails before any response (replyWithError)', async () => {
    nock(origin).get('/fail').replyWithError('scripted failure');
    const { gate, limited } = setup();
    const error = await settle(limited(`${origin}/fail`));
    expect((error as Error).message).toBe('scripted failure');
    await expectIdle(gate);
  });

  it('returns the permit when the body errors mid-way', async () => {
    nock(origin)
      .get('/mid-body')
      .reply(200, () => {
        let reads = 0;
        return new Readable({
          read() {
            if (reads++ === 0) this.push('first part');
            else this.destroy(new Error('mid-body failure'));
          },
        });
      });
    const { gate, limited } = setup();
    const res = await limited(`${origin}/mid-body`);
    const error = await settle(res.text());
    expect((error as Error).message).toBe('mid-body failure');
    await expectIdle(gate);
  });

  it('returns the permit at once for a response without a body (204)', async () => {
    nock(origin).delete('/invoices/1').reply(204);
    const { gate, limited } = setup();
    const res = await limited(`${origin}/invoices/1`, { method: 'DELETE' });
    expect(res.status).toBe(204);
    expect(res.body).toBeNull();
    await expectIdle(gate);
  });

  it('frees a permit pinned by an unread body after maxHold, aborting the fetch with PermitHoldTimeoutError', async () => {
    nock(origin).get('/report').reply(200, 'never read');
    const { gate, limited, signals } = setup({ maxHold: 500 }); // room for a loaded machine
    const res = await limited(`${origin}/report`);
    expect(gate.held).toBe(1);
    const signal = signals[0]!;
    await once(signal, 'abort'); // the gate's hold timer, not a sleep
    expect(signal.reason).toBeInstanceOf(PermitHoldTimeoutError);
    expect((signal.reason as PermitHoldTimeoutError).partner).toBe('partner');
    await expectIdle(gate);
    expect(gate.stats().holdTimeouts).toBe(1);
    // The caller who comes back later learns why the body is gone.
    expect(await settle(res.text())).toBe(signal.reason);
    await expectIdle(gate);
  });

  it('serves calls in turn through a gate of 1, passing a 503 and its headers through untouched', async () => {
    nock(origin).get('/a').reply(200, 'A').get('/b').reply(503, 'busy', { 'retry-after': '1' });
    const { gate, limited } = setup({ limit: 1 });
    const [a, b] = await Promise.all([
      limited(`${origin}/a`).then((r) => r.text()),
      limited(`${origin}/b`).then(async (r) => [
        r.status,
        r.headers.get('retry-after'),
        await r.text(),
      ]),
    ]);
    expect(a).toBe('A');
    expect(b).toEqual([503, '1', 'busy']);
    await expectIdle(gate);
    expect(gate.stats().acquired).toBe(2);
  });
});

const flavors: [string, Fetch, typeof Request][] = [
  ["Node's global fetch", globalThis.fetch as Fetch, Request],
  ['undici.fetch', undiciFetch as unknown as Fetch, UndiciRequest as unknown as typeof Request],
];

describe.each(flavors)('limitFetch(%s) against a real partner', (_name, baseFetch, RequestCtor) => {
  let partner: Partner;

  beforeEach(async () => {
    partner = await startPartner();
  });
  afterEach(async () => {
    await partner.close();
  });

  function setup(rule: Rule = {}) {
    const { limiter, gate } = limiterFor(partner.origin, rule);
    return { limiter, gate, limited: limitFetch(baseFetch, limiter) };
  }

  it('1,000 concurrent calls through a gate of 20: the partner sees exactly 20 at its peak', async () => {
    // A wait deadline far beyond the drain time even on a loaded machine (a load of 20 took 11 s).
    const { gate, limited } = setup({ limit: 20, maxQueue: 1000, queueTimeout: 60_000 });
    const shutdown = new AbortController(); // a long-lived signal shared by every call
    const calls = Array.from({ length: 1000 }, () =>
      limited(`${partner.url}/held`, { signal: shutdown.signal }).then((r) => r.text()),
    );
    await partner.waitForActive(20);
    expectInvariant(gate);
    expect(gate.held).toBe(20);
    expect(gate.queued).toBe(980);
    expect(partner.arrived).toBe(20);
    partner.openHeld(); // from now on the partner answers at once: still never more than 20
    const bodies = await Promise.all(calls);
    expect(bodies.every((body) => body === 'xx')).toBe(true);
    expect(partner.peak).toBe(20);
    expect(partner.arrived).toBe(1000);
    await expectIdle(gate);
    expect(gate.stats().acquired).toBe(1000);
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0); // no listener leak
  }, 60_000);

  it('returns the permit after a 500 response, read or cancelled', async () => {
    const { gate, limited } = setup();
    const res = await limited(`${partner.url}/status?code=500`);
    expect(res.status).toBe(500);
    expect(res.statusText).toBe('Internal Server Error');
    expect(await res.text()).toBe('status 500');
    await expectIdle(gate);
    const unread = await limited(`${partner.url}/status?code=500`);
    expectInvariant(gate);
    await unread.body!.cancel();
    await expectIdle(gate);
  });

  it('returns the permit when the connection is refused', async () => {
    const closed = http.createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const origin = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const { gate, limiter } = limiterFor(origin, { limit: 2 });
    const error = await settle(limitFetch(baseFetch, limiter)(`${origin}/`));
    expect(error).toBeInstanceOf(TypeError); // fetch's own 'fetch failed'
    expect(((error as TypeError).cause as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
    await expectIdle(gate);
  });

  it('returns the permit when the connection resets mid-body', async () => {
    const { gate, limited } = setup();
    const res = await limited(`${partner.url}/reset`);
    expect(gate.held).toBe(1);
    const error = await settle(res.text());
    expect(error).toBeInstanceOf(Error);
    await expectIdle(gate);
  });

  it('frees a stalled body after maxHold: the read rejects with PermitHoldTimeoutError and the partner sees the request closed', async () => {
    const { gate, limited } = setup({ maxHold: 500 }); // room for a loaded machine
    const res = await limited(`${partner.url}/stall`);
    const reader = res.body!.getReader();
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('first chunk');
    expect(gate.held).toBe(1);
    const error = await settle(reader.read()); // the stall never ends: only maxHold can free it
    expect(error).toBeInstanceOf(PermitHoldTimeoutError);
    expect((error as PermitHoldTimeoutError).partner).toBe('partner');
    await partner.waitForClosedEarly(1);
    await expectIdle(gate);
    expect(gate.stats().holdTimeouts).toBe(1);
  });

  it('frees a body never read at all after maxHold', async () => {
    // maxHold leaves room for a loaded machine between the headers and the first assertion.
    const { gate, limited } = setup({ maxHold: 500 });
    const res = await limited(`${partner.url}/stall`);
    expect(res.status).toBe(200);
    expect(gate.held).toBe(1);
    await partner.waitForClosedEarly(1); // freed by maxHold, not by us
    await expectIdle(gate);
    expect(gate.stats().holdTimeouts).toBe(1);
    expect(await settle(res.text())).toBeInstanceOf(PermitHoldTimeoutError);
  });

  it('rejects at once with the reason when the caller aborts while queued; the request never reaches the partner', async () => {
    const { gate, limited } = setup({ limit: 1 });
    const first = limited(`${partner.url}/held`);
    await partner.waitForArrived(1);
    const ac = new AbortController();
    const queued = settle(limited(`${partner.url}/ok`, { signal: ac.signal }));
    const queuedRequest = settle(
      limited(new RequestCtor(`${partner.url}/ok`, { signal: ac.signal })),
    );
    expect(gate.queued).toBe(2);
    const reason = new Error('caller gave up');
    ac.abort(reason);
    expect(gate.queued).toBe(0); // the waiters leave the queue at once
    expectInvariant(gate);
    expect(await queued).toBe(reason);
    expect(await queuedRequest).toBe(reason);
    partner.release();
    expect(await (await first).text()).toBe('xx');
    expect(partner.arrived).toBe(1);
    await expectIdle(gate);
    expect(gate.stats().abortedWaiting).toBe(2);
  });

  it('takes no permit for a signal that is already aborted, even when one is free', async () => {
    const { gate, limited } = setup();
    const reason = new Error('too late');
    expect(await settle(limited(`${partner.url}/ok`, { signal: AbortSignal.abort(reason) }))).toBe(
      reason,
    );
    await expectIdle(gate);
    expect(gate.stats().acquired).toBe(0);
    expect(partner.arrived).toBe(0);
  });

  it('returns the permit when the caller aborts while waiting for headers; the partner sees the request closed', async () => {
    const { gate, limited } = setup();
    const ac = new AbortController();
    const pending = settle(limited(`${partner.url}/held`, { signal: ac.signal }));
    await partner.waitForArrived(1);
    expect(gate.held).toBe(1);
    ac.abort();
    expect(((await pending) as Error).name).toBe('AbortError');
    await partner.waitForClosedEarly(1);
    await released(gate);
    await expectIdle(gate);
  });

  it('returns the permit when the caller aborts while the body streams; the partner sees the request closed', async () => {
    const { gate, limited } = setup();
    const ac = new AbortController();
    const res = await limited(`${partner.url}/stall`, { signal: ac.signal });
    const reader = res.body!.getReader();
    await reader.read();
    expect(gate.held).toBe(1);
    const reason = new Error('client went away');
    ac.abort(reason);
    await released(gate);
    await expectIdle(gate); // a few turns later, whether or not anyone is reading
    expect(await settle(reader.read())).toBe(reason);
    await partner.waitForClosedEarly(1);
    await released(gate);
    await expectIdle(gate);
  });

  it('returns the permit when the Request’s own signal aborts while the body streams', async () => {
    const { gate, limited } = setup();
    const ac = new AbortController();
    const res = await limited(new RequestCtor(`${partner.url}/stall`, { signal: ac.signal }));
    expect(gate.held).toBe(1);
    ac.abort();
    await released(gate);
    await expectIdle(gate);
    expect(((await settle(res.text())) as Error).name).toBe('AbortError');
    await partner.waitForClosedEarly(1);
  });

  it('releases once when the body is read twice, cancelled after reading, or cancelled twice', async () => {
    const { gate, limited } = setup();
    const res = await limited(`${partner.url}/ok`);
    expect(await res.text()).toBe('xx');
    expect(await settle(res.text())).toBeInstanceOf(TypeError); // body already used
    expect(await settle(res.body!.cancel())).toBeInstanceOf(TypeError); // locked by text()
    await expectIdle(gate);
    const res2 = await limited(`${partner.url}/ok?size=100000`);
    await res2.body!.cancel();
    await res2.body!.cancel();
    expect(await settle(res2.text())).toBeInstanceOf(TypeError);
    await expectIdle(gate);
    const res3 = await limited(`${partner.url}/ok`);
    const reader = res3.body!.getReader();
    while (!(await reader.read()).done) {}
    await reader.cancel();
    await expectIdle(gate);
    expect(gate.stats().acquired).toBe(3);
    expect(gate.stats().released).toBe(3);
  });

  it('gives each hop of a redirect chain its own permit, one after the other, keeping url and redirected', async () => {
    const { gate, limited } = setup({ limit: 1 });
    const pending = limited(`${partner.url}/redirect?to=/held&hops=3`);
    await partner.waitForArrived(4);
    expect(gate.held).toBe(1);
    expect(gate.stats().acquired).toBe(4);
    partner.release();
    const res = await pending;
    expect(res.redirected).toBe(true);
    expect(res.url).toBe(`${partner.url}/held`);
    expect(res.type).toBe('basic');
    const copy = res.clone();
    expect(copy.url).toBe(res.url);
    expect(copy.redirected).toBe(true);
    expect(await copy.text()).toBe('xx');
    expect(await res.text()).toBe('xx');
    await expectIdle(gate);
    expect(gate.stats().acquired).toBe(4);
    expect(partner.peak).toBe(1);
  });

  it('returns the permit at once for HEAD and 204, handing back the original response', async () => {
    const { gate, limited } = setup();
    const head = await limited(`${partner.url}/ok`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(head.body).toBeNull();
    await expectIdle(gate);
    const empty = await limited(`${partner.url}/status?code=204`);
    expect(empty.status).toBe(204);
    expect(empty.url).toBe(`${partner.url}/status?code=204`);
    await expectIdle(gate);
  });

  it('answers with the same Response class as the wrapped fetch', async () => {
    const { gate, limited } = setup();
    const plain = await baseFetch(`${partner.url}/ok`);
    const res = await limited(`${partner.url}/ok`);
    expect(res.constructor).toBe(plain.constructor);
    expect(res).toBeInstanceOf(plain.constructor);
    await plain.text();
    expect(await res.arrayBuffer()).toEqual(new TextEncoder().encode('xx').buffer);
    await expectIdle(gate);
  });

  it('sheds with QueueFullError itself (not wrapped in TypeError) when the queue is full; nothing is sent', async () => {
    const { gate, limited } = setup({ limit: 1, maxQueue: 0 });
    const first = limited(`${partner.url}/held`);
    await partner.waitForArrived(1);
    const shed = await settle(limited(`${partner.url}/ok`));
    expect(shed).toBeInstanceOf(QueueFullError);
    expect(findShedError(shed)).toBe(shed);
    expect((shed as QueueFullError).partner).toBe('partner');
    expect((shed as QueueFullError).retryAfterMs).toBeGreaterThan(0);
    expectInvariant(gate);
    partner.release();
    await (await first).text();
    expect(partner.arrived).toBe(1);
    await expectIdle(gate);
  });

  it('sheds with QueueTimeoutError at the wait deadline; nothing is sent', async () => {
    const { gate, limited } = setup({ limit: 1, queueTimeout: 50 });
    const first = limited(`${partner.url}/held`);
    await partner.waitForArrived(1);
    const timedOut = await settle(limited(`${partner.url}/ok`));
    expect(timedOut).toBeInstanceOf(QueueTimeoutError);
    expectInvariant(gate);
    partner.release();
    await (await first).text();
    expect(partner.arrived).toBe(1);
    await expectIdle(gate);
  });

  it('aborts a fetch still waiting for headers after maxHold, rejecting with PermitHoldTimeoutError', async () => {
    // maxHold leaves room for a loaded machine to get the request to the partner first.
    const { gate, limited } = setup({ maxHold: 500 });
    const call = settle(limited(`${partner.url}/held`));
    await partner.waitForArrived(1);
    const error = await call;
    expect(error).toBeInstanceOf(PermitHoldTimeoutError);
    await partner.waitForClosedEarly(1);
    await expectIdle(gate);
    expect(gate.stats().holdTimeouts).toBe(1);
  });
});

describe('limitFetch: bad input', () => {
  it.each([
    ['a malformed URL', 'not a url'],
    ['a relative URL', '/invoices'],
    ['an ftp: URL', 'ftp://files.example/report.csv'],
    ['a file: URL', new URL('file:///etc/passwd')],
    ['no input', undefined],
  ])('rejects %s with a TypeError and takes no permit', async (_what, input) => {
    const { fn, calls } = scriptedFetch();
    const limiter = new HostLimiter({ unknownHosts: { limit: 1 } });
    const limited = limitFetch(fn, limiter);
    const error = await settle(limited(input as string));
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toMatch(/URL|protocol/);
    expect(calls).toHaveLength(0);
    expect(limiter.gates().size).toBe(0);
  });

  it('rejects a signal that is not an AbortSignal with a TypeError naming it', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test');
    const error = await settle(
      limitFetch(fn, limiter)('http://p.test/', { signal: 'soon' as unknown as AbortSignal }),
    );
    expect(error).toBeInstanceOf(TypeError);
    expect((error as Error).message).toMatch(/init\.signal/);
    expect(calls).toHaveLength(0);
    await expectIdle(gate);
  });

  it('rejects a fetchFn that is not a function, and bad limiter options, at construction', () => {
    expect(() => limitFetch(undefined as never, {})).toThrow(TypeError);
    expect(() => limitFetch(fetch, { partners: [{ name: 'x', hosts: [], limit: 1 }] })).toThrow(
      /hosts/,
    );
  });

  it("refuses a host outside the allow-list with UnknownHostError under unknownHosts: 'reject'", async () => {
    const { fn, calls } = scriptedFetch();
    const { limiter } = limiterFor('http://p.test');
    const error = await settle(limitFetch(fn, limiter)('http://elsewhere.test/'));
    expect(error).toBeInstanceOf(UnknownHostError);
    expect(calls).toHaveLength(0);
  });

  it("passes through untouched, same Response object, under unknownHosts: 'unlimited'", async () => {
    const response = new Response('free');
    const fn = async (_input: string, init?: { signal?: AbortSignal }) => {
      expect(init?.signal).toBeUndefined(); // not even our signal: fetchFn gets the call as made
      return response;
    };
    const limited = limitFetch(fn, { unknownHosts: 'unlimited' });
    expect(await limited('http://anywhere.test/')).toBe(response);
  });
});

describe('limitFetch: regressions, named after the race they pin', () => {
  it('fetchFn throwing synchronously: the permit comes back and the call rejects (no sync throw)', async () => {
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1 });
    const boom = new Error('sync boom');
    const limited = limitFetch((_input: string): Promise<Response> => {
      throw boom;
    }, limiter);
    const call = limited('http://p.test/');
    expect(call).toBeInstanceOf(Promise);
    expect(await settle(call)).toBe(boom);
    await expectIdle(gate);
  });

  it('fetchFn rejecting: the permit comes back once', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1 });
    const pending = settle(limitFetch(fn, limiter)('http://p.test/'));
    expect(gate.held).toBe(1);
    const failure = new TypeError('fetch failed');
    calls[0]!.fail(failure);
    expect(await pending).toBe(failure);
    await expectIdle(gate);
  });

  for (const ticks of [0, 1, 2, 3, 4, 5]) {
    it(`caller aborts ${ticks} microtask(s) after its queued permit is granted: the permit goes back once, the reason wins`, async () => {
      const { fn, calls } = scriptedFetch();
      const { gate, limiter } = limiterFor('http://p.test', { limit: 1 });
      const limited = limitFetch(fn, limiter);
      const blocker = gate.tryAcquire()!;
      const ac = new AbortController();
      const queued = settle(limited('http://p.test/', { signal: ac.signal }));
      expect(gate.queued).toBe(1);
      const reason = new Error('gave up');
      blocker.release(); // grants to the waiter...
      for (let i = 0; i < ticks; i++) await Promise.resolve();
      ac.abort(reason); // ...and the caller aborts around the grant
      expect(await queued).toBe(reason);
      for (const call of calls) expect(call.signal.aborted).toBe(true); // if sent, cancelled
      await released(gate);
      await expectIdle(gate);
    });
  }

  it('maxHold fires while fetchFn ignores its signal and answers late: the late response is cancelled, the call rejects with PermitHoldTimeoutError, no double release', async () => {
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1, maxHold: 30 });
    let answer!: (response: Response) => void;
    let seen!: AbortSignal;
    const deaf = (_input: string, init?: { signal?: AbortSignal }) => {
      seen = init!.signal!;
      return new Promise<Response>((resolve) => {
        answer = resolve;
      });
    };
    const pending = settle(limitFetch(deaf, limiter)('http://p.test/'));
    await once(seen, 'abort');
    await released(gate);
    await expectIdle(gate); // taken back by the gate
    const body = scriptedBody();
    answer(new Response(body.stream));
    expect(await pending).toBeInstanceOf(PermitHoldTimeoutError);
    await body.cancelled;
    await released(gate);
    await expectIdle(gate);
    expect(gate.stats().holdTimeouts).toBe(1);
  });

  it('maxHold fires while a read is pending: the read rejects with PermitHoldTimeoutError, the late chunk is dropped', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1, maxHold: 30 });
    const pending = limitFetch(fn, limiter)('http://p.test/');
    const body = scriptedBody();
    calls[0]!.respond(new Response(body.stream));
    const res = await pending;
    const reader = res.body!.getReader();
    const read = settle(reader.read());
    await once(calls[0]!.signal, 'abort');
    expect(await read).toBeInstanceOf(PermitHoldTimeoutError);
    expect(await body.cancelled).toBeInstanceOf(PermitHoldTimeoutError);
    await expectIdle(gate);
  });

  it('body ends, then the caller aborts: no second release, and the fetch is not aborted after the fact', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1 });
    const ac = new AbortController();
    const pending = limitFetch(fn, limiter)('http://p.test/', { signal: ac.signal });
    const body = scriptedBody();
    calls[0]!.respond(new Response(body.stream));
    const res = await pending;
    const text = res.text();
    body.push('done');
    body.end();
    expect(await text).toBe('done');
    await expectIdle(gate);
    ac.abort();
    expect(calls[0]!.signal.aborted).toBe(false); // the listener left with the permit
    await expectIdle(gate);
  });

  it('body ends and the caller cancels in the same tick: released exactly once', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1 });
    const pending = limitFetch(fn, limiter)('http://p.test/');
    const body = scriptedBody();
    calls[0]!.respond(new Response(body.stream));
    const res = await pending;
    const reader = res.body!.getReader();
    const read = reader.read();
    body.end();
    const cancel = reader.cancel('bye');
    await Promise.allSettled([read, cancel]);
    await expectIdle(gate);
    expect(gate.stats().released).toBe(1);
  });

  it('body errors while the caller aborts: released exactly once, the caller sees an error', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1 });
    const ac = new AbortController();
    const pending = limitFetch(fn, limiter)('http://p.test/', { signal: ac.signal });
    const body = scriptedBody();
    calls[0]!.respond(new Response(body.stream));
    const res = await pending;
    const read = settle(res.text());
    body.error(new Error('socket hang up'));
    ac.abort();
    expect(await read).toBeInstanceOf(Error);
    await released(gate);
    await expectIdle(gate);
    expect(gate.stats().released).toBe(1);
  });

  it('a queued caller cancelled by QueueTimeoutError never calls fetchFn, even when a permit frees right after', async () => {
    const { fn, calls } = scriptedFetch();
    const { gate, limiter } = limiterFor('http://p.test', { limit: 1, queueTimeout: 20 });
    const limited = limitFetch(fn, limiter);
    const blocker = gate.tryAcquire()!;
    const error = await settle(limited('http://p.test/'));
    expect(error).toBeInstanceOf(QueueTimeoutError);
    blocker.release();
    expect(calls).toHaveLength(0);
    await expectIdle(gate);
  });
});
