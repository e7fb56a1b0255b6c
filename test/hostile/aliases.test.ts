/**
 * Issue 36 item 6 (aliases of a partner get their own gate) and issue 33 item 3 (a wrong port or
 * scheme in a rule silently removes the cap). A partner `hosts: ['127.0.0.1'], limit: 1` saw 10
 * at once through `[::ffff:127.0.0.1]`; a rule `http://127.0.0.1:1` left `:<real port>` under
 * the unknown-host gate (1,024) without a word.
 */
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitFetch } from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

let partner: Partner;
let agent: Agent;
let warnings: (Error & { code?: string })[];
const onWarning = (w: Error) => warnings.push(w);
beforeEach(async () => {
  partner = await startPartner();
  agent = new Agent({ keepAliveTimeout: 1000 });
  warnings = [];
  process.on('warning', onWarning);
});
afterEach(async () => {
  process.off('warning', onWarning);
  await agent.destroy();
  await partner.close();
});

/** The partner's port. */
const port = () => partner.origin.slice(partner.origin.lastIndexOf(':') + 1);

describe('aliases that need no DNS fold into the partner’s gate (issue 36 item 6)', () => {
  it.each([
    ['IPv4-mapped IPv6', (p: string) => `http://[::ffff:127.0.0.1]:${p}`],
    ['IPv4-mapped IPv6, hex', (p: string) => `http://[::ffff:7f00:1]:${p}`],
    ['IPv4-mapped IPv6, long form', (p: string) => `http://[0:0:0:0:0:ffff:127.0.0.1]:${p}`],
    ['short IPv4', (p: string) => `http://127.1:${p}`],
    ['integer IPv4', (p: string) => `http://2130706433:${p}`],
    ['hex IPv4', (p: string) => `http://0x7f.0.0.1:${p}`],
    ['trailing dot', (p: string) => `http://127.0.0.1.:${p}`],
  ])('%s: 10 calls at once, the partner (limit 1) sees 1', async (_form, base) => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['127.0.0.1'], limit: 1, maxQueue: 20 }],
    });
    const limited = limitFetch(undiciFetch, limiter);
    expect(limiter.gateFor(base(port()))).toBe(limiter.gate('ledger'));
    // Through the plain and the folded form together: one gate for both.
    const both = Array.from({ length: 10 }, (_, i) =>
      limited(`${i % 2 === 0 ? base(port()) : partner.origin}/ok?delay=5`, {
        dispatcher: agent,
      }).then((res) => res.text()),
    );
    await Promise.all(both);
    expect(partner.arrived).toBe(10);
    expect(partner.peak).toBe(1);
    expect([...limiter.gates().keys()]).toEqual(['ledger']);
  });

  it('a rule written as an IPv4-mapped address caps the IPv4 address too', () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['[::ffff:127.0.0.1]'], limit: 1 }],
    });
    expect(limiter.gateFor(`http://127.0.0.1:${port()}`)).toBe(limiter.gate('ledger'));
  });

  it('localhost is a name, not folded: the call runs under the unknown-host gate with a HOSTGATE_RULE_NEAR_MISS warning, once', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['127.0.0.1'], limit: 1 }],
    });
    const limited = limitFetch(undiciFetch, limiter);
    for (let i = 0; i < 3; i++) {
      const res = await limited(`http://localhost:${port()}/ok`, {
        dispatcher: agent,
      });
      await res.text();
    }
    await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on next tick
    const near = warnings.filter((w) => w.code === 'HOSTGATE_RULE_NEAR_MISS');
    expect(near).toHaveLength(1);
    expect(near[0]!.message).toContain(`http://localhost:${port()}`);
    expect(near[0]!.message).toContain('"ledger"');
    expect(limiter.gates().has(`http://localhost:${port()}`)).toBe(true);
  });

  it('strictOrigins: a loopback alias of a rule is an error, and nothing is sent', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['127.0.0.1'], limit: 1 }],
      strictOrigins: true,
    });
    const limited = limitFetch(undiciFetch, limiter);
    await expect(limited(`http://localhost:${port()}/ok`, { dispatcher: agent })).rejects.toThrow(
      /localhost.*ledger.*strictOrigins/s,
    );
    expect(partner.arrived).toBe(0);
  });
});

describe('a rule with the wrong port or scheme is loud (issue 33 item 3)', () => {
  it('warns once per origin with HOSTGATE_RULE_NEAR_MISS, naming the origin and the rule', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['http://127.0.0.1:1'], limit: 2 }],
    });
    const limited = limitFetch(undiciFetch, limiter);
    for (let i = 0; i < 5; i++) {
      const res = await limited(`${partner.origin}/ok?i=${i}`, {
        dispatcher: agent,
      });
      await res.text();
    }
    limiter.gateFor(`https://127.0.0.1:${port()}`); // another origin: its own warning
    await new Promise((resolve) => setImmediate(resolve));
    const near = warnings.filter((w) => w.code === 'HOSTGATE_RULE_NEAR_MISS');
    expect(near.map((w) => w.message.split(' ')[0])).toEqual([
      partner.origin,
      `https://127.0.0.1:${port()}`,
    ]);
    expect(near[0]!.message).toMatch(/"ledger".*scheme or port/);
    expect(near[0]!.message).toMatch(/strictOrigins/);
  });

  it('strictOrigins makes it an error while setting up: nothing is sent', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['http://127.0.0.1:1'], limit: 2 }],
      strictOrigins: true,
    });
    const limited = limitFetch(undiciFetch, limiter);
    await expect(limited(`${partner.origin}/ok`, { dispatcher: agent })).rejects.toThrow(TypeError);
    expect(partner.arrived).toBe(0);
    // An unrelated unnamed host is no near miss: neither an error nor a warning.
    expect(limiter.gateFor('http://127.0.0.2:80')).toBeDefined();
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings).toEqual([]);
  });

  it('rejects a strictOrigins that is not a boolean, naming the option', () => {
    expect(() => new HostLimiter({ strictOrigins: 'yes' as unknown as boolean })).toThrow(
      /strictOrigins must be a boolean, got "yes"/,
    );
  });
});
