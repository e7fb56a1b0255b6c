/**
 * Issue 36 item 1: attacker-chosen origins and a service's own unnamed hosts share no failure
 * domain. 256 hanging requests to distinct origins used to fill maxHosts, evict the internal
 * service's idle gate, and refuse every other unnamed host with HOSTGATE_TOO_MANY_HOSTS.
 */
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_HOSTS, HostLimiter, limitFetch, OVERFLOW_ORIGINS } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { type HostileServers, startHostileServers } from './servers.js';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('256 slow attacker URLs do not deny unnamed hosts (issue 36 item 1)', () => {
  it('after DEFAULT_MAX_HOSTS hanging requests to distinct origins, 20/20 calls to an internal unnamed host are sent, and its gate keeps its place', async () => {
    const internal: Partner = await startPartner();
    cleanups.push(() => internal.close());
    const attacker: HostileServers = await startHostileServers(DEFAULT_MAX_HOSTS + 1);
    cleanups.push(() => attacker.close());
    const agent = new Agent({ keepAliveTimeout: 1000 });
    cleanups.push(() => agent.destroy());
    const limiter = new HostLimiter(); // defaults: as the reviewer ran it
    const limited = limitFetch(undiciFetch, limiter);
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on('warning', onWarning);
    cleanups.push(() => process.off('warning', onWarning));

    // The service's own unnamed host, called once before the attack: its gate has a place.
    const first = await limited(`${internal.url}/ok`, { dispatcher: agent });
    await first.text();
    const internalGate = limiter.gates().get(internal.origin)!;
    expect(internalGate).toBeDefined();

    // The attack: one hanging request per attacker origin, one more than maxHosts.
    const stop = new AbortController();
    const hanging = attacker.origins.map((origin) =>
      limited(`${origin}/slow`, { dispatcher: agent, signal: stop.signal }).catch((e) => e),
    );
    await attacker.waitForArrived(attacker.origins.length);

    const results = await Promise.allSettled(
      Array.from({ length: 20 }, async () => {
        const res = await limited(`${internal.url}/ok`, { dispatcher: agent });
        await res.text();
        return res.status;
      }),
    );
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(results.map((r) => (r as PromiseFulfilledResult<number>).value)).toEqual(
      Array(20).fill(200),
    );
    expect(internal.arrived).toBe(21);
    // Seen before, so it kept its place: the same gate, not the overflow one.
    expect(limiter.gates().get(internalGate.name!)).toBe(internalGate);
    expect(internalGate.stats().acquired).toBe(21);
    // The attacker origins past the bound (255 had a place left) share the overflow gate,
    // sent and held there instead of refused.
    const overflow = limiter.gates().get(OVERFLOW_ORIGINS)!;
    expect(overflow.stats()).toMatchObject({ held: 2, shedQueueFull: 0 });
    expect(limiter.gates().size).toBe(DEFAULT_MAX_HOSTS + 1);
    expect(warnings.map((w) => (w as Error & { code?: string }).code)).toContain(
      'HOSTGATE_HOSTS_OVERFLOW',
    );

    stop.abort();
    await Promise.all(hanging);
  });

  it('a new unnamed host arriving after the attack is served through the overflow gate, not refused', async () => {
    const limiter = new HostLimiter({ maxHosts: 4 });
    const held = [];
    for (let i = 0; i < 4; i++)
      held.push(limiter.gateFor(`http://127.0.0.1:${1000 + i}`)!.tryAcquire()!);
    const gate = limiter.gateFor('http://127.0.0.1:2000')!; // a host never seen before
    expect(gate.name).toBe(OVERFLOW_ORIGINS);
    const permit = gate.tryAcquire();
    expect(permit).toBeDefined();
    permit!.release();
    for (const p of held) p.release();
    // Bounded: four places and the one overflow gate, however many more origins come.
    for (let i = 0; i < 1000; i++) limiter.gateFor(`http://127.0.0.1:${3000 + i}`);
    expect(limiter.gates().size).toBe(5);
  });
});
