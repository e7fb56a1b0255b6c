/**
 * Issue 36 item 5: memory follows maxHosts, not origins per minute. A per-origin gate that had
 * granted a permit kept its maxHold timer armed after the release, and the timer kept the
 * evicted gate alive for a minute (50,000 origins: +158.7 MB for 60 s). An evicted gate must
 * be garbage at once: a released permit disarms its gate's timer.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch, type Semaphore } from '../../src/index.js';
import { startHostileServers } from './servers.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Gates still reachable after a full collection (WeakRefs live until the job ends: yield first). */
async function alive(refs: WeakRef<Semaphore>[]): Promise<number> {
  await new Promise((resolve) => setImmediate(resolve));
  gc();
  return refs.filter((ref) => ref.deref() !== undefined).length;
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('an evicted per-origin gate holds nothing (issue 36 item 5)', () => {
  it('after calls to 40 loopback origins through limitFetch, only the gates in their places stay reachable', async () => {
    const servers = await startHostileServers(40, (_req, res) => res.end('ok'));
    cleanups.push(() => servers.close());
    const agent = new Agent({ keepAliveTimeout: 1000 });
    cleanups.push(() => agent.destroy());
    const maxHosts = 4;
    const limiter = new HostLimiter({ maxHosts, evictIdleAfter: 0 }); // maxHold: 60 s
    const limited = limitFetch(undiciFetch, limiter);
    const refs: WeakRef<Semaphore>[] = [];
    for (const origin of servers.origins) {
      const res = await limited(`${origin}/`, { dispatcher: agent });
      expect(await res.text()).toBe('ok');
      refs.push(new WeakRef(limiter.gates().get(origin)!));
    }
    expect(limiter.gates().size).toBe(maxHosts);
    expect(await alive(refs)).toBe(maxHosts);
  });

  it('5,000 origins, each granted and released once: live gates stay at maxHosts', async () => {
    const limiter = new HostLimiter({ maxHosts: 16, evictIdleAfter: 0 });
    const refs: WeakRef<Semaphore>[] = [];
    for (let i = 0; i < 5000; i++) {
      const gate = limiter.gateFor(`http://127.0.0.1:${1024 + i}/`)!;
      gate.tryAcquire()!.release();
      refs.push(new WeakRef(gate));
    }
    expect(await alive(refs)).toBe(16);
    expect(limiter.gates().size).toBe(16); // the limiter itself is alive through the collection
  });

  it('a released permit disarms the timer; the next grant arms it again and maxHold still takes back', async () => {
    const limiter = new HostLimiter({ unknownHosts: { limit: 2, maxHold: 50 } });
    const gate = limiter.gateFor('http://127.0.0.1:1')!;
    gate.tryAcquire()!.release();
    const permit = gate.tryAcquire()!;
    const timedOut = new Promise((resolve) => {
      permit.onHoldTimeout = resolve;
    });
    await timedOut;
    expect(permit.released).toBe(true);
    expect(gate.stats()).toMatchObject({ held: 0, holdTimeouts: 1 });
  });
});
