import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type PartnerConfig,
  type PartnerProcess,
  startPartnerHere,
} from '../../bench/overload/partner.js';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { loadPhase } from '../helpers/load-phase.js';

/**
 * A real partner on loopback that serves `capacity` requests at once and queues the rest
 * inside itself; its capacity changes mid-test. 48 callers loop on it; each phase runs until
 * the effective limit has been seen to follow, once (event-driven, bounded by a request budget;
 * see loadPhase for why once).
 */
const CONTRACT = 40;
/** 100 ms calls: a busy machine's event-loop lag stays small against the RTT signal. */
const base: PartnerConfig = {
  capacity: 40,
  serviceMs: 100,
  extraMs: 0,
  queueMax: 1000,
  serveAbandoned: true,
};

let partner: PartnerProcess;
beforeAll(async () => {
  partner = await startPartnerHere(base);
});
afterAll(async () => {
  await partner.close();
});

describe('adaptive limit against a partner whose capacity changes', () => {
  it.each(['aimd', 'gradient'] as const)(
    '%s: the effective limit follows capacity down and up; the partner never sees more than the contract',
    async (algorithm) => {
      await partner.configure(base);
      await partner.reset();
      const limiter = new HostLimiter({
        partners: [
          {
            name: 'partner',
            hosts: [partner.origin],
            limit: CONTRACT,
            maxQueue: 1000,
            queueTimeout: 60_000,
            // A busy CI machine adds latency noise: a looser tolerance keeps growth possible.
            adaptive: { algorithm, min: 2, initial: 6, tolerance: 1.5 },
          },
        ],
        unknownHosts: 'reject',
      });
      const gate = limiter.gate('partner')!;
      const agent = new Agent({ keepAliveTimeout: 10_000 });
      const dispatcher = agent.compose(limitHosts(limiter));
      let over = 0;
      /** 48 callers; `over` counts responses after which the gate held more than the contract. */
      const callers = Array.from({ length: 48 }, () => async () => {
        const res = await request(`${partner.origin}/work`, { dispatcher });
        await res.body.text();
        if (gate.held > CONTRACT) over++; // after a cut, held drains down to the new limit
      });
      const seen = (phase: string, sent: number) =>
        `${phase} (${sent} requests): ${JSON.stringify(limiter.stats().partner?.adaptive)}`;
      try {
        const up = await loadPhase(callers, () => gate.limit >= 24, 4000);
        expect(up.reached, seen('the limit never grew to 24', up.sent)).toBe(true);
        await partner.configure({ ...base, capacity: 8 });
        // capacity 8: a full gate of L waits L/8 × 100 ms. AIMD cuts while the smoothed RTT is
        // past 2× the minimum (L > 16); the gradient settles near 8 × tolerance + 4 = 16.
        const down = await loadPhase(callers, () => gate.limit <= 20, 4000);
        expect(down.reached, seen('the limit did not come down to 20', down.sent)).toBe(true);
        await partner.configure(base);
        const back = await loadPhase(callers, () => gate.limit >= 28, 6000);
        expect(back.reached, seen('the limit did not grow back to 28', back.sent)).toBe(true);
        const stats = limiter.stats().partner!;
        expect(stats.adaptive!.limitChanges).toBeGreaterThan(10);
        expect(stats.adaptive!.contractLimit).toBe(CONTRACT);
        expect((await partner.stats()).peakOpen).toBeLessThanOrEqual(CONTRACT);
        expect(over).toBe(0);
      } finally {
        await agent.destroy();
      }
    },
    60_000,
  );

  it('arms no timer that keeps the process alive', async () => {
    // A child process builds an adaptive limiter, makes calls, closes its server and agent,
    // and must exit on its own.
    const script = `
      import http from 'node:http';
      import { Agent, request } from 'undici';
      import { HostLimiter, limitHosts } from './src/index.ts';
      const server = http.createServer((req, res) => res.end('ok'));
      await new Promise((r) => server.listen(0, '127.0.0.1', r));
      const origin = 'http://127.0.0.1:' + server.address().port;
      const limiter = new HostLimiter({ partners: [{ name: 'p', hosts: [origin], limit: 10,
        adaptive: { algorithm: 'gradient' } }] });
      const agent = new Agent();
      const dispatcher = agent.compose(limitHosts(limiter));
      for (let i = 0; i < 20; i++) await (await request(origin + '/', { dispatcher })).body.text();
      await agent.close();
      server.close();
      console.log('done', limiter.stats().p.adaptive.samples);
    `;
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script],
      {
        cwd: process.cwd(),
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    const kill = setTimeout(() => child.kill('SIGKILL'), 30_000);
    const [code, signal] = await once(child, 'exit');
    clearTimeout(kill);
    expect(signal).toBeNull();
    expect(code).toBe(0);
    expect(out.trim()).toBe('done 20');
  }, 40_000);
});
