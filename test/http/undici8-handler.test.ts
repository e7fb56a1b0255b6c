import { Agent, type Dispatcher, interceptors, request, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts, type Semaphore } from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { undiciMajor } from '../helpers/undici.js';
import { released } from '../helpers/until.js';

// undici 8 dropped the callback-API wrappers: every handler limitHosts sees speaks the
// controller API only, and onRequestStart may fire again for the same request.
if (process.env.HOSTGATE_UNDICI === '8' && undiciMajor !== 8) {
  throw new Error('HOSTGATE_UNDICI=8, yet undici 7 was loaded: check resolve.alias');
}
if (undiciMajor !== 8) {
  console.log(
    'undici 8 handler tests skipped: they run with HOSTGATE_UNDICI=8 on Node >= 22.19 (CI: Node 24)',
  );
}

type Controller = Dispatcher.DispatchController;
type Handler = Dispatcher.DispatchHandler;

let partner: Partner;
let agent: Agent;

function gated(limit: number) {
  const limiter = new HostLimiter({
    partners: [{ name: 'p', hosts: [partner.origin], limit, maxQueue: 100, queueTimeout: 10_000 }],
    unknownHosts: 'reject',
  });
  return { gate: limiter.gate('p')!, limiter };
}

function expectIdle(gate: Semaphore) {
  expectInvariant(gate);
  expect(gate.held).toBe(0);
  expect(gate.stats().released).toBe(gate.stats().acquired);
  expect(gate.stats().doubleReleases).toBe(0);
}

/** A controller as an inner dispatcher hands it out; `aborts` records what reached it. */
function scriptedController(aborts: unknown[]): Controller {
  return {
    abort: (reason: Error) => aborts.push(reason),
    pause: () => {},
    resume: () => {},
    paused: false,
    aborted: false,
    reason: null,
    rawHeaders: null,
    rawTrailers: null,
  } as unknown as Controller;
}

describe.runIf(undiciMajor === 8)('limitHosts on undici 8 (controller handlers only)', () => {
  beforeEach(async () => {
    partner = await startPartner();
    agent = new Agent({ keepAliveTimeout: 10_000 });
  });
  afterEach(async () => {
    await agent.destroy();
    await partner.close();
  });

  it("sees only controller-API handlers from undici 8's request and fetch, and holds the cap", async () => {
    const { gate, limiter } = gated(5);
    const seen = new Set<string>();
    const spy: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) => {
      const legacy = handler as { onHeaders?: unknown; onConnect?: unknown };
      seen.add(
        `${typeof handler.onRequestStart}/${typeof legacy.onHeaders}/${typeof legacy.onConnect}`,
      );
      return dispatch(opts, handler);
    };
    const dispatcher = agent.compose(limitHosts(limiter), spy);
    const calls = Array.from({ length: 50 }, (_, i) =>
      i % 2 === 0
        ? request(`${partner.url}/ok?delay=2`, { dispatcher }).then((r) => r.body.text())
        : undiciFetch(`${partner.url}/ok?delay=2`, { dispatcher }).then((r) => r.text()),
    );
    await Promise.all(calls);
    expect([...seen]).toEqual(['function/undefined/undefined']);
    expect(partner.peak).toBe(5);
    expectIdle(gate);
    expect(gate.stats().acquired).toBe(50);
  });

  it('holds the permit of a hand-written controller handler until onResponseEnd, and releases it once', async () => {
    const { gate, limiter } = gated(1);
    const dispatcher = agent.compose(limitHosts(limiter));
    const events: string[] = [];
    const done = new Promise<void>((resolve, reject) => {
      const handler: Handler = {
        onRequestStart: () => events.push('start'),
        onResponseStart: (_c, status) => {
          events.push(`status:${status}:held=${gate.held}`);
        },
        onResponseData: () => {
          events.push('data');
        },
        onResponseEnd: () => {
          events.push(`end:held=${gate.held}`);
          resolve();
        },
        onResponseError: (_c, error) => reject(error),
      };
      dispatcher.dispatch({ origin: partner.origin, path: '/ok?size=3', method: 'GET' }, handler);
    });
    await done;
    expect(events).toEqual(['start', 'status:200:held=1', 'data', 'end:held=0']);
    expectIdle(gate);
  });

  it('takes one permit when onRequestStart fires again (a retried request), and aborts the newest controller', async () => {
    const { gate, limiter } = gated(2);
    let inner: Handler | undefined;
    const scripted: Dispatcher.Dispatch = (_opts, handler) => {
      inner = handler;
      return true;
    };
    const dispatch = limitHosts(limiter)(scripted);
    const callerControllers: Controller[] = [];
    const errors: unknown[] = [];
    dispatch(
      { origin: partner.origin, path: '/', method: 'GET' },
      {
        onRequestStart: (controller) => callerControllers.push(controller),
        onResponseError: (_c, error) => errors.push(error),
      },
    );
    const firstAborts: unknown[] = [];
    const secondAborts: unknown[] = [];
    inner!.onRequestStart!(scriptedController(firstAborts), {});
    inner!.onRequestStart!(scriptedController(secondAborts), {}); // undici 8 re-runs it on retry
    expect(gate.held).toBe(1);
    expect(gate.stats().acquired).toBe(1);
    // The caller holds hostgate's controller from dispatch on, once; a re-start does not
    // hand it another, and its abort reaches whichever inner controller is current.
    expect(callerControllers).toHaveLength(1);
    const reason = new DOMException('caller gave up', 'AbortError');
    callerControllers[0]!.abort(reason);
    expect(firstAborts).toEqual([]);
    expect(secondAborts).toEqual([reason]);
    inner!.onResponseError!(scriptedController([]), reason);
    inner!.onResponseError!(scriptedController([]), reason); // a late duplicate changes nothing
    await released(gate);
    expect(errors).toHaveLength(1); // one terminal callback
    expectIdle(gate);
    expect(gate.stats().acquired).toBe(1);
  });

  it("gives every attempt of undici 8's retry interceptor its own permit, none held while backing off", async () => {
    const { gate, limiter } = gated(1);
    const dispatcher = agent.compose(
      limitHosts(limiter),
      interceptors.retry({ maxRetries: 3, minTimeout: 1, timeoutFactor: 1, statusCodes: [503] }),
    );
    const res = await request(`${partner.url}/flaky?id=u8&fails=2&code=503`, { dispatcher });
    expect(res.statusCode).toBe(200);
    await res.body.text();
    expect(partner.arrived).toBe(3);
    expect(partner.peak).toBe(1);
    expectIdle(gate);
    expect(gate.stats().acquired).toBe(3);
  });

  it("returns the permit when undici 8's fetch aborts while queued, before any byte is sent", async () => {
    const { gate, limiter } = gated(1);
    const dispatcher = agent.compose(limitHosts(limiter));
    const first = request(`${partner.url}/held`, { dispatcher });
    await partner.waitForArrived(1);
    const ac = new AbortController();
    const queued = undiciFetch(`${partner.url}/ok`, { dispatcher, signal: ac.signal }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(gate.queued).toBe(1);
    ac.abort();
    expect(((await queued) as Error).name).toBe('AbortError');
    expect(gate.queued).toBe(0);
    partner.release();
    await (await first).body.text();
    expect(partner.arrived).toBe(1);
    expectIdle(gate);
  });
});
