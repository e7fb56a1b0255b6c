import express from 'express';
import { Registry } from 'prom-client';
import supertest from 'supertest';
import { Agent, request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { outbound, shed } from '../../middleware/index.js';
import {
  findShedError,
  HostLimiter,
  limitHosts,
  PartnerCooldownError,
  PartnerOpenError,
  type PartnerRule,
} from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { type BudgetPartner, ietf, startBudgetPartner } from '../helpers/budget-partner.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis, type RedisServer } from '../helpers/redis-server.js';
import { until } from '../helpers/until.js';
import { metricValue } from '../observe/prom-text.js';
import { privateRedis, untilAsync, useFleet, zcard } from './clients.js';

const redis = privateRedis();
const MODES = ['fifo', 'leased'] as const;
type Mode = (typeof MODES)[number];
/** Leased: short intervals, so Redis hears of every permit's return within a refresh. */
const sharing = (mode: Mode): PartnerRule['shared'] =>
  mode === 'fifo' ? true : { mode: 'leased', refreshMs: 100, leaseMs: 1000 };

/**
 * What Redis counts for a gate: a FIFO gate's leases and tickets, a leased gate's permits held
 * by every live process (as each last reported them).
 */
async function inRedis(server: RedisServer, gate: string, mode: Mode): Promise<number> {
  if (mode === 'fifo') return (await zcard(server, gate, 'h')) + (await zcard(server, gate, 'q'));
  const flat = (await server.command('HGETALL', `test:{${gate}}:l`)) as string[];
  let held = 0;
  for (let i = 0; i < flat.length; i += 2) {
    if (flat[i] !== '_s') held += Number(flat[i + 1]!.split(' ')[2]);
  }
  return held;
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** A limiter for one shared partner rule, and a call through limitHosts that resolves with the status or the shed error. */
async function replica(store: unknown, rule: PartnerRule) {
  const limiter = new HostLimiter({ store: store as never, partners: [rule] });
  const agent = new Agent({ keepAliveTimeout: 10_000 });
  closers.push(() => agent.close());
  const dispatcher = agent.compose(limitHosts(limiter));
  const call = (url: string): Promise<number | Error> =>
    request(url, { dispatcher }).then(
      async (res) => {
        await res.body.text();
        return res.statusCode;
      },
      (error: unknown) => (findShedError(error) ?? error) as Error,
    );
  return { limiter, gate: limiter.gate(rule.name)!, call };
}

describeRedis('a partner’s rate-limit headers and breaker on shared gates', () => {
  const fleet = useFleet('node-redis', redis);

  /** Six calls, one at a time, against a budget of 3 that resets 2 s after it is spent. */
  async function throughTheHold(mode: Mode): Promise<BudgetPartner> {
    const partner = await startBudgetPartner(3, 2000, ietf);
    closers.push(partner.close);
    const name = `budget-${mode}`;
    const { limiter, gate, call } = await replica(await fleet.store(), {
      name,
      hosts: [partner.origin],
      limit: 1,
      shared: sharing(mode),
      queueTimeout: 6000,
    });
    const calls = Array.from({ length: 6 }, () => call(`${partner.origin}/x`));
    // Spent: the three calls behind it wait in this process, holding nothing in Redis (a FIFO
    // gate's tickets that Redis granted during the hold went straight back).
    const waiting = () =>
      mode === 'fifo' ? limiter.stats()[name]!.partnerHold!.waiting : gate.queued;
    const holding = () => limiter.stats()[name]!.partnerHold!.remainingMs > 0;
    await until(
      () => partner.firstSpentAt !== undefined && waiting() === 3 && gate.held === 0,
      'held',
    );
    // Synchronously, at that moment (the hold's timer cannot run in between): a call that
    // cannot wait out the hold is shed at once; a held call its caller aborts leaves at once; a
    // call too heavy for the gate, held first at a FIFO gate's door, still rejects (never throws).
    expect(holding()).toBe(true);
    const early = gate.acquire({ timeout: 100 }).catch((e: unknown) => e);
    const controller = new AbortController();
    const aborted = gate.acquire({ signal: controller.signal, timeout: 6000 });
    expect(waiting()).toBe(4);
    controller.abort(new Error('client went away'));
    expect(waiting()).toBe(3);
    const heavy = gate.acquire({ weight: 2, timeout: 6000 }).catch((e: unknown) => e);
    expect(await early).toBeInstanceOf(PartnerCooldownError);
    await expect(aborted).rejects.toThrow('client went away');
    // A FIFO gate: Redis holds no ticket and no lease for the held calls, read while the hold
    // runs (a machine too slow to read it within the 2 s only logs so). A leased gate's held
    // calls hold no permit (held 0 above); they count in its demand, as any waiter's do, and a
    // refresh may keep a unit of its block reserved for them (leased-gate.ts #refresh).
    if (mode === 'fifo') {
      await untilAsync(
        async () => (await inRedis(redis(), name, mode)) === 0 || !holding(),
        'empty in Redis during the hold',
      );
      if (holding()) expect(await inRedis(redis(), name, mode)).toBe(0);
      else console.log('the hold ended before Redis was read; not checked during it');
    }
    expect(await Promise.all(calls)).toEqual(Array(6).fill(200));
    expect(await heavy).toBeInstanceOf(RangeError);
    await untilAsync(async () => (await inRedis(redis(), name, mode)) === 0, 'empty in Redis');
    expect(limiter.stats()[name]!.partnerHold).toMatchObject({ holds: 2, shed: 1, waiting: 0 });
    const s = gate.stats();
    expect(s).toMatchObject({ held: 0, doubleReleases: 0 });
    expect(s.acquired).toBe(s.released);
    if (mode === 'fifo') expectInvariant(gate); // a leased gate's room is its block, not its limit
    return partner;
  }

  it('holds calls until the partner’s reset, FIFO and leased: no 429 after the first signal, nothing left in Redis', async () => {
    const partners = await Promise.all(MODES.map(throughTheHold));
    for (const partner of partners) {
      expect(partner.log.map((entry) => entry.status)).toEqual(Array(6).fill(200));
      expect(partner.peak).toBe(1);
      const spentAt = partner.firstSpentAt!;
      const next = partner.log.find((entry) => entry.at > spentAt)!;
      expect(next.at).toBeGreaterThanOrEqual(spentAt + 2000);
    }
  });

  let partner: Partner | undefined;
  afterEach(async () => {
    await partner?.close();
    partner = undefined;
  });

  it.each(MODES)(
    'sheds at once while the partner is down (%s), the first probe after it returns closes the breaker, and every permit comes back',
    async (mode) => {
      partner = await startPartner();
      const name = `down-${mode}`;
      const rule: PartnerRule = {
        name,
        hosts: [partner.origin],
        limit: 2,
        shared: sharing(mode),
        breaker: { failures: 3, halfOpenAfterMs: 300 },
      };
      const store = await fleet.store();
      const { limiter, gate, call } = await replica(store, rule);
      if (mode === 'leased') await (gate as LeasedSemaphore).ready();
      // Down for its first three calls (503), then back.
      const url = `${partner.origin}/flaky?id=${mode}&fails=3&code=503`;
      expect(await Promise.all([call(url), call(url), call(url)])).toEqual([503, 503, 503]);
      expect(limiter.stats()[name]!.breaker).toMatchObject({ state: 'open', opened: 1 });

      const shedCalls = await Promise.all(Array.from({ length: 10 }, () => call(url)));
      for (const outcome of shedCalls) expect(outcome).toBeInstanceOf(PartnerOpenError);
      expect(partner.arrived).toBe(3);
      const app = express();
      app.use(outbound({ limiter }));
      app.get('/call', (req, res, next) => {
        req.outbound.fetch(url).then((r) => res.sendStatus(r.status), next);
      });
      app.use(shed());
      const answer = await supertest(app).get('/call');
      expect(answer.status).toBe(503);
      expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
      // No refusal took a permit or a ticket in Redis.
      await store.settled();
      await untilAsync(async () => (await inRedis(redis(), name, mode)) === 0, 'empty in Redis');
      expect(limiter.stats()[name]!.breaker).toMatchObject({ state: 'open', shed: 11 });
      const registry = new Registry();
      registerMetrics(limiter, { registry });
      const text = await registry.metrics();
      expect(metricValue(text, 'hostgate_breaker_state', { partner: name })).toBe(2);
      const shedOpen = { partner: name, reason: 'breaker_open' };
      expect(metricValue(text, 'hostgate_shed_total', shedOpen)).toBe(11);

      await until(() => limiter.stats()[name]!.breaker!.halfOpenInMs === 0, 'half-open');
      expect(await call(url)).toBe(200); // the probe
      expect(limiter.stats()[name]!.breaker).toMatchObject({ state: 'closed', opened: 1 });
      expect(await Promise.all([call(url), call(url), call(url)])).toEqual([200, 200, 200]);
      expect(partner.arrived).toBe(7);
      expect(partner.peak).toBeLessThanOrEqual(2);

      await until(() => gate.held === 0, 'permits back');
      await store.settled();
      await untilAsync(async () => (await inRedis(redis(), name, mode)) === 0, 'empty in Redis');
      const s = gate.stats();
      expect(s.acquired).toBe(s.released);
      expect(s.doubleReleases).toBe(0);
      if (mode === 'fifo') expectInvariant(gate);
    },
  );
});
