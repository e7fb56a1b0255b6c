/**
 * Issue 36 item 2: a redirect does not bypass a partner's cap. Through limitFetch, an unnamed
 * URL answering 302 to a partner ran the partner hop under the unnamed origin's gate (1,024):
 * partner `limit: 2` saw 20 at once. Every hop that reaches a partner holds that partner's
 * permit, whatever the entry point.
 */
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch, limitHosts } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { until } from '../helpers/until.js';
import { type HostileServers, startHostileServers } from './servers.js';

let partner: Partner;
let attacker: HostileServers;
let agent: Agent;
/** What the attacker's server saw of each request: method, its authorization header, body. */
let seenByAttacker: { method: string; authorization: string | undefined; body: string }[];
/** Where the attacker redirects, and with which status (per test). */
let redirect: { status: number; to: () => string };

beforeEach(async () => {
  partner = await startPartner();
  seenByAttacker = [];
  redirect = { status: 302, to: () => `${partner.url}/held` };
  attacker = await startHostileServers(1, (req, res) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      seenByAttacker.push({
        method: req.method!,
        authorization: req.headers.authorization,
        body,
      });
      res.writeHead(redirect.status, { location: redirect.to() }).end();
    });
  });
  agent = new Agent({ keepAliveTimeout: 1000 });
});
afterEach(async () => {
  await agent.destroy();
  await attacker.close();
  await partner.close();
});

/** The attacker redirects with `status` to itself at `again` once, then to the partner. */
function twice(status: number, again: string): typeof redirect {
  let hops = 0;
  return { status, to: () => (++hops === 1 ? again : `${partner.url}/ok`) };
}

function limiter() {
  return new HostLimiter({
    partners: [
      { name: 'ledger', hosts: [partner.origin], limit: 2, maxQueue: 100, queueTimeout: 10_000 },
    ],
  });
}

describe('a redirect cannot carry calls past a partner’s cap (issue 36 item 2)', () => {
  it('limitFetch: 20 calls to an unnamed URL that 302s to the partner (limit 2): the partner sees 2 at once', async () => {
    const l = limiter();
    const limited = limitFetch(undiciFetch, l);
    const calls = Array.from({ length: 20 }, () =>
      limited(`${attacker.origins[0]}/r`, { dispatcher: agent }).then(async (res) => {
        expect(res.redirected).toBe(true);
        expect(res.url).toBe(`${partner.url}/held`);
        return res.text();
      }),
    );
    const ledger = l.gate('ledger')!;
    await until(() => ledger.held + ledger.queued === 20, 'all 20 at the partner’s gate');
    expect(ledger.stats()).toMatchObject({ held: 2, queued: 18 });
    partner.openHeld();
    await Promise.all(calls);
    expect(partner.arrived).toBe(20);
    expect(partner.peak).toBe(2);
    expect(l.gate('ledger')!.stats()).toMatchObject({ acquired: 20, held: 0 });
    // The unnamed origin's own gate held only its own hops, and holds nothing now.
    expect(l.gates().get(attacker.origins[0]!)!.stats()).toMatchObject({ acquired: 20, held: 0 });
  });

  it('the undici interceptor (limitHosts) holds the same line: 2', async () => {
    const l = limiter();
    const dispatcher = agent.compose(limitHosts(l));
    const calls = Array.from({ length: 20 }, () =>
      undiciFetch(`${attacker.origins[0]}/r`, { dispatcher }).then((res) => res.text()),
    );
    await partner.waitForActive(2);
    await attacker.waitForArrived(20);
    partner.openHeld();
    await Promise.all(calls);
    expect(partner.peak).toBe(2);
  });

  it('follows as fetch does: a 307 sends the method and body again; a 303 turns a POST into a GET', async () => {
    const limited = limitFetch(undiciFetch, limiter());
    partner.openHeld();
    redirect = twice(307, `${attacker.origins[0]}/second`);
    const res = await limited(`${attacker.origins[0]}/first`, {
      dispatcher: agent,
      method: 'POST',
      body: 'payload',
      headers: { 'content-type': 'text/plain' },
    });
    await res.text();
    expect(seenByAttacker).toEqual([
      { method: 'POST', authorization: undefined, body: 'payload' },
      { method: 'POST', authorization: undefined, body: 'payload' },
    ]);
    seenByAttacker = [];
    redirect = twice(303, `${attacker.origins[0]}/after`);
    await (
      await limited(`${attacker.origins[0]}/form`, { dispatcher: agent, method: 'POST', body: 'x' })
    ).text();
    expect(seenByAttacker.map((s) => [s.method, s.body])).toEqual([
      ['POST', 'x'],
      ['GET', ''],
    ]);
  });

  it('drops Authorization on a change of origin, keeps it on the same origin', async () => {
    const limited = limitFetch(undiciFetch, limiter());
    const other: (string | undefined)[] = [];
    const elsewhere = await startHostileServers(1, (req, res) => {
      other.push(req.headers.authorization);
      res.end('ok');
    });
    try {
      let hops = 0;
      redirect.to = () => (++hops === 1 ? `${attacker.origins[0]}/again` : elsewhere.origins[0]!);
      const res = await limited(`${attacker.origins[0]}/start`, {
        dispatcher: agent,
        headers: { authorization: 'Bearer secret' },
      });
      expect(await res.text()).toBe('ok');
      expect(seenByAttacker.map((s) => s.authorization)).toEqual([
        'Bearer secret',
        'Bearer secret',
      ]);
      expect(other).toEqual([undefined]);
    } finally {
      await elsewhere.close();
    }
  });

  it('stops a redirect loop after 20 redirects with fetch’s TypeError, every permit back', async () => {
    const l = limiter();
    const limited = limitFetch(undiciFetch, l);
    redirect.to = () => `${attacker.origins[0]}/loop`;
    await expect(limited(`${attacker.origins[0]}/loop`, { dispatcher: agent })).rejects.toThrow(
      'fetch failed',
    );
    expect(attacker.arrived).toBe(21);
    expect(l.gates().get(attacker.origins[0]!)!.stats()).toMatchObject({ held: 0, acquired: 21 });
  });

  it("redirect: 'manual' is the caller's: the 302 comes back, the partner is not called", async () => {
    const limited = limitFetch(undiciFetch, limiter());
    const res = await limited(`${attacker.origins[0]}/r`, {
      dispatcher: agent,
      redirect: 'manual',
    });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe(`${partner.url}/held`);
    expect(partner.arrived).toBe(0);
  });
});
