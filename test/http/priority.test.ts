import { Agent, type Dispatcher, request, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  HostLimiter,
  limitFetch,
  limitHosts,
  QueueFullError,
  type Semaphore,
  withPriority,
} from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { until } from '../helpers/until.js';

const PRIORITIES = [
  { name: 'interactive', share: 0.75 },
  { name: 'batch', share: 0.25 },
];

let partner: Partner;
let agent: Agent;
let limiter: HostLimiter;
let gate: Semaphore;

beforeEach(async () => {
  partner = await startPartner();
  agent = new Agent({ keepAliveTimeout: 5000 });
  limiter = new HostLimiter({
    partners: [
      {
        name: 'p',
        hosts: [partner.origin],
        limit: 1,
        maxQueue: 1,
        queueTimeout: 10_000,
        priorities: PRIORITIES,
      },
    ],
  });
  gate = limiter.gate('p')!;
});

afterEach(async () => {
  await agent.close();
  await partner.close();
});

/** Settles to the call's status, or to its error; records the order calls finish in. */
function track(order: string[], id: string, call: Promise<number>): Promise<number | unknown> {
  return call.then(
    (status) => {
      order.push(id);
      return status;
    },
    (error: unknown) => error,
  );
}

const viaRequest = (dispatcher: Dispatcher, path: string, options: object = {}) =>
  request(`${partner.url}${path}`, { dispatcher, ...options }).then(async (r) => {
    await r.body.text();
    return r.statusCode;
  });

const viaFetch = (
  fetchFn: typeof undiciFetch,
  dispatcher: Dispatcher | undefined,
  path: string,
  init: object = {},
) =>
  fetchFn(`${partner.url}${path}`, { dispatcher, ...init }).then(async (r) => {
    await r.text();
    return r.status;
  });

describe('priority classes through the HTTP layers', () => {
  it('limitHosts reads the priorityClass request option: a full queue sheds the batch call', async () => {
    const dispatcher = agent.compose(limitHosts(limiter));
    const order: string[] = [];
    const holder = track(order, 'holder', viaRequest(dispatcher, '/held'));
    await partner.waitForActive(1);
    const batch = track(order, 'batch', viaRequest(dispatcher, '/ok', { priorityClass: 'batch' }));
    await until(() => gate.queued === 1, 'queued');
    const interactive = track(
      order,
      'interactive',
      viaRequest(dispatcher, '/ok', { priorityClass: 'interactive' }),
    );
    expect(await batch).toBeInstanceOf(QueueFullError); // made room for the higher class
    partner.openHeld();
    expect([await holder, await interactive]).toEqual([200, 200]);
    expect(order).toEqual(['holder', 'interactive']);
    expect(gate.stats().priorities).toMatchObject({
      interactive: { acquired: 2, shedQueueFull: 0 }, // the holder named no class: the first
      batch: { acquired: 0, shedQueueFull: 1 },
    });
    expectInvariant(gate);
  });

  it('withPriority gives fetch through limitHosts a class; interactive is served before batch', async () => {
    limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [partner.origin], limit: 1, priorities: PRIORITIES }],
    });
    gate = limiter.gate('p')!;
    const interactive = agent.compose(limitHosts(limiter));
    const batch = agent.compose(limitHosts(limiter), withPriority('batch'));
    const order: string[] = [];
    const holder = track(order, 'holder', viaFetch(undiciFetch, interactive, '/held'));
    await partner.waitForActive(1);
    const b = track(order, 'batch', viaFetch(undiciFetch, batch, '/ok'));
    await until(() => gate.queued === 1, 'batch queued');
    const i = track(order, 'interactive', viaFetch(undiciFetch, interactive, '/ok'));
    await until(() => gate.queued === 2, 'interactive queued');
    partner.openHeld();
    expect([await holder, await i, await b]).toEqual([200, 200, 200]);
    expect(order).toEqual(['holder', 'interactive', 'batch']);
    expect(gate.stats().priorities).toMatchObject({
      interactive: { acquired: 2 },
      batch: { acquired: 1 },
    });
    expectInvariant(gate);
  });

  it("limitFetch reads init.priorityClass; a request's own option wins over withPriority", async () => {
    const limited = limitFetch(undiciFetch, limiter);
    const order: string[] = [];
    const holder = track(order, 'holder', viaFetch(limited, agent, '/held'));
    await partner.waitForActive(1);
    const batch = track(
      order,
      'batch',
      viaFetch(limited, agent, '/ok', { priorityClass: 'batch' }),
    );
    await until(() => gate.queued === 1, 'queued');
    const interactive = track(order, 'interactive', viaFetch(limited, agent, '/ok'));
    expect(await batch).toBeInstanceOf(QueueFullError); // limitFetch rejects with it directly
    partner.openHeld();
    expect([await holder, await interactive]).toEqual([200, 200]);
    expect(gate.stats().priorities).toMatchObject({ batch: { shedQueueFull: 1 } });

    const tagged = agent.compose(limitHosts(limiter), withPriority('batch'));
    expect(await viaRequest(tagged, '/ok', { priorityClass: 'interactive' })).toBe(200);
    expect(gate.stats().priorities).toMatchObject({ interactive: { acquired: 3 } });
    expectInvariant(gate);
  });

  it('an unknown class fails the call with a TypeError naming the classes, and holds nothing', async () => {
    const dispatcher = agent.compose(limitHosts(limiter));
    await expect(viaRequest(dispatcher, '/ok', { priorityClass: 'bulk' })).rejects.toThrow(
      /priority must be one of interactive, batch, got "bulk"/,
    );
    await expect(
      viaFetch(limitFetch(undiciFetch, limiter), agent, '/ok', { priorityClass: 'bulk' }),
    ).rejects.toThrow(/priority must be one of interactive, batch/);
    expect(gate.stats()).toMatchObject({ held: 0, queued: 0, acquired: 0 });
    expect(partner.arrived).toBe(0);
  });

  it('rejects bad options with a TypeError', () => {
    expect(() => withPriority('')).toThrow(/withPriority: name must be a non-empty string/);
    expect(
      () =>
        new HostLimiter({
          partners: [
            { name: 'p', hosts: ['p.test'], limit: 1, shared: true, priorities: PRIORITIES },
          ],
        }),
    ).toThrow(/priorities are not supported with shared: true yet/);
    expect(
      () =>
        new HostLimiter({
          partners: [
            { name: 'p', hosts: ['p.test'], limit: 1, priorities: [{ name: 'x', share: 2 }] },
          ],
        }),
    ).toThrow(TypeError);
  });
});
