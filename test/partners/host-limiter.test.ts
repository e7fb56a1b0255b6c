import { describe, expect, it } from 'vitest';
import { isShedError, QueueFullError, UnknownHostError } from '../../src/common/errors.js';
import { type Permit, Semaphore } from '../../src/gate/semaphore.js';
import {
  DEFAULT_MAX_HOLD_MS,
  DEFAULT_MAX_HOSTS,
  DEFAULT_UNKNOWN_HOST_GATE,
  HostLimiter,
  type HostLimiterOptions,
  OVERFLOW_ORIGINS,
  type PartnerRule,
} from '../../src/partners/host-limiter.js';
import { prng } from '../helpers/prng.js';

/** Builds a limiter from deliberately ill-typed input, the way a JS caller or a config file would. */
function construct(options: unknown): HostLimiter {
  return new HostLimiter(options as HostLimiterOptions);
}

function rule(overrides: Partial<PartnerRule> & Record<string, unknown> = {}): PartnerRule {
  return { name: 'billing', hosts: ['api.billing.example'], limit: 20, ...overrides };
}

function randomLabel(random: () => number): string {
  let label = '';
  for (let i = 0; i < 12; i++)
    label += 'abcdefghijklmnopqrstuvwxyz0123456789'[Math.floor(random() * 36)];
  return label;
}

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to throw');
}

/**
 * The largest size reached, while `fn` runs, by any Map that is given a string key containing
 * `marker`. It sees every Map the limiter keeps, whatever it calls them, so a cache that grows
 * with its input shows up here without reaching into private state.
 */
function largestMapWhile(marker: string, fn: () => void): number {
  const original = Map.prototype.set;
  let largest = 0;
  Map.prototype.set = function set(this: Map<unknown, unknown>, key: unknown, value: unknown) {
    const result = original.call(this, key, value);
    if (typeof key === 'string' && key.includes(marker)) largest = Math.max(largest, this.size);
    return result;
  } as typeof original;
  try {
    fn();
  } finally {
    Map.prototype.set = original;
  }
  return largest;
}

function expectBalanced(gate: Semaphore): void {
  const s = gate.stats();
  expect(s.held + s.available).toBe(s.limit);
  expect(s.held).toBe(s.acquired - s.released);
}

describe('HostLimiter: partner rules', () => {
  it('gives one partner one gate, shared by every host pattern in its rule', () => {
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'billing',
          hosts: ['https://pay.billing.example:8443', 'api.billing.example', '*.cdn.example'],
          limit: 2,
        },
      ],
    });
    const gate = limiter.gate('billing');
    expect(gate).toBeInstanceOf(Semaphore);
    expect(limiter.gateFor('https://pay.billing.example:8443')).toBe(gate);
    expect(limiter.gateFor('https://api.billing.example')).toBe(gate);
    expect(limiter.gateFor('https://img.cdn.example')).toBe(gate);

    // A permit taken through one host counts against the others: the partner's cap is shared.
    const first = limiter.gateFor('https://api.billing.example')!.tryAcquire();
    const second = limiter.gateFor('https://img.cdn.example')!.tryAcquire();
    expect(first).toBeDefined();
    expect(second).toBeDefined();
    expect(limiter.gateFor('https://pay.billing.example:8443')!.tryAcquire()).toBeUndefined();
    expect(limiter.stats().billing).toMatchObject({ held: 2, available: 0 });
    first!.release();
    second!.release();
    expect(limiter.stats().billing).toMatchObject({ held: 0, available: 2 });
  });

  it('builds each partner gate from its rule, named after the partner, maxHold 60 s by default', () => {
    const limiter = new HostLimiter({
      partners: [
        { name: 'billing', hosts: ['a.example'], limit: 20, maxQueue: 200, queueTimeout: 250 },
        { name: 'search', hosts: ['b.example'], limit: 3, maxHold: 5000 },
      ],
    });
    const billing = limiter.gate('billing')!;
    expect(billing.name).toBe('billing');
    expect(billing.maxHold).toBe(DEFAULT_MAX_HOLD_MS);
    expect(billing.stats()).toMatchObject({ limit: 20, maxQueue: 200, queueTimeout: 250 });
    const search = limiter.gate('search')!;
    expect(search.maxHold).toBe(5000);
    expect(search.stats()).toMatchObject({ name: 'search', limit: 3 });
    expect(limiter.gate('nobody')).toBeUndefined();
  });

  it("names the partner in its gate's shed errors", async () => {
    const limiter = new HostLimiter({ partners: [rule({ limit: 1, maxQueue: 0 })] });
    const gate = limiter.gateFor('https://api.billing.example/v1/invoices')!;
    const permit = gate.tryAcquire()!;
    const error = await gate.acquire().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(QueueFullError);
    expect((error as QueueFullError).partner).toBe('billing');
    permit.release();
  });

  it('matches a hostname pattern on any scheme and any port', () => {
    const limiter = new HostLimiter({ partners: [rule()] });
    const gate = limiter.gate('billing');
    for (const url of [
      'https://api.billing.example',
      'http://api.billing.example',
      'https://api.billing.example:8443',
      'http://api.billing.example:8080/v1',
    ]) {
      expect(limiter.gateFor(url), url).toBe(gate);
    }
  });

  it('matches an origin pattern on exactly that scheme, host and port', () => {
    const limiter = new HostLimiter({
      partners: [rule({ hosts: ['https://api.billing.example:8443'] })],
      unknownHosts: 'reject',
    });
    expect(limiter.gateFor('https://api.billing.example:8443/x')).toBe(limiter.gate('billing'));
    for (const url of [
      'https://api.billing.example',
      'http://api.billing.example:8443',
      'https://api.billing.example:8444',
      'https://other.billing.example:8443',
    ]) {
      expect(() => limiter.gateFor(url), url).toThrow(UnknownHostError);
    }
  });

  it('matches a wildcard on subdomains at any depth, not on the bare domain or look-alikes', () => {
    const limiter = new HostLimiter({
      partners: [rule({ hosts: ['*.billing.example'] })],
      unknownHosts: 'reject',
    });
    const gate = limiter.gate('billing');
    expect(limiter.gateFor('https://api.billing.example')).toBe(gate);
    expect(limiter.gateFor('https://eu.api.billing.example')).toBe(gate);
    for (const url of [
      'https://billing.example',
      'https://evilbilling.example',
      'https://billing.example.evil.example',
      'https://api.billing.example.org',
    ]) {
      expect(() => limiter.gateFor(url), url).toThrow(UnknownHostError);
    }
  });

  describe('the most specific rule wins: origin, then hostname, then the longest wildcard', () => {
    const limiter = new HostLimiter({
      partners: [
        { name: 'origin', hosts: ['https://api.x.example:8443'], limit: 1 },
        { name: 'hostname', hosts: ['api.x.example'], limit: 1 },
        { name: 'wide', hosts: ['*.x.example'], limit: 1 },
        { name: 'narrow', hosts: ['*.api.x.example'], limit: 1 },
      ],
      unknownHosts: 'reject',
    });
    it.each([
      ['https://api.x.example:8443', 'origin'],
      ['https://api.x.example', 'hostname'],
      ['http://api.x.example:8443', 'hostname'],
      ['https://eu.api.x.example', 'narrow'],
      ['https://a.b.api.x.example', 'narrow'],
      ['https://www.x.example', 'wide'],
      ['https://apix.example.x.example', 'wide'],
    ])('%s -> %s', (url, partner) => {
      expect(limiter.gateFor(url)).toBe(limiter.gate(partner));
    });

    it('regardless of the order the rules are listed in', () => {
      const reversed = new HostLimiter({
        partners: [
          { name: 'narrow', hosts: ['*.api.x.example'], limit: 1 },
          { name: 'wide', hosts: ['*.x.example'], limit: 1 },
          { name: 'hostname', hosts: ['api.x.example'], limit: 1 },
          { name: 'origin', hosts: ['https://api.x.example:8443'], limit: 1 },
        ],
      });
      expect(reversed.gateFor('https://api.x.example:8443')).toBe(reversed.gate('origin'));
      expect(reversed.gateFor('https://api.x.example')).toBe(reversed.gate('hostname'));
      expect(reversed.gateFor('https://eu.api.x.example')).toBe(reversed.gate('narrow'));
      expect(reversed.gateFor('https://www.x.example')).toBe(reversed.gate('wide'));
    });
  });
});

describe('HostLimiter: origin normalisation', () => {
  it.each([
    ['case', 'API.Billing.Example', ['https://api.billing.example', 'HTTPS://API.BILLING.EXAMPLE']],
    [
      'default https port',
      'https://billing.example',
      ['https://billing.example:443', 'https://billing.example/v1'],
    ],
    [
      'explicit default https port in the pattern',
      'https://billing.example:443',
      ['https://billing.example', 'https://BILLING.example:443/'],
    ],
    ['default http port', 'http://billing.example:80', ['http://billing.example']],
    [
      'trailing dot in the pattern',
      'api.billing.example.',
      ['https://api.billing.example', 'https://api.billing.example.'],
    ],
    ['trailing dot in the URL', 'api.billing.example', ['https://api.billing.example./x']],
    [
      'trailing dot in an origin pattern',
      'https://api.billing.example.:443',
      ['https://api.billing.example', 'https://api.billing.example.'],
    ],
    ['trailing dot in a wildcard', '*.billing.example.', ['https://eu.billing.example.']],
    ['bare IPv6 literal', '::1', ['http://[::1]:3000', 'https://[0:0:0:0:0:0:0:1]']],
    ['bracketed IPv6 literal', '[::1]', ['http://[::1]:3000']],
    ['IPv6 origin', 'http://[::1]:3000', ['http://[0::1]:3000/health']],
    ['IPv4 spelled numerically', '127.0.0.1', ['http://127.1:3000', 'http://2130706433']],
    [
      'IDN in the pattern',
      'bücher.example',
      ['https://xn--bcher-kva.example', 'https://BÜCHER.example'],
    ],
    ['punycode in the pattern', 'xn--bcher-kva.example', ['https://bücher.example']],
    ['IDN in a wildcard', '*.bücher.example', ['https://shop.xn--bcher-kva.example']],
  ])('%s: %s', (_what, pattern, urls) => {
    const limiter = new HostLimiter({
      partners: [rule({ hosts: [pattern] })],
      unknownHosts: 'reject',
    });
    for (const url of urls) expect(limiter.gateFor(url), url).toBe(limiter.gate('billing'));
  });

  it('keys per-origin gates by normalised origin: scheme, lower-case host, explicit port', () => {
    const limiter = new HostLimiter();
    const gate = limiter.gateFor('https://Unknown.Example');
    for (const same of [
      'https://unknown.example:443',
      'https://unknown.example./v1?q=1',
      'HTTPS://UNKNOWN.EXAMPLE:443/#top',
      new URL('https://unknown.example/path'),
    ]) {
      expect(limiter.gateFor(same), String(same)).toBe(gate);
    }
    expect(limiter.gateFor('http://unknown.example')).not.toBe(gate);
    expect(limiter.gateFor('https://unknown.example:8443')).not.toBe(gate);
    expect(limiter.gateFor('http://[::1]')).toBe(limiter.gateFor('http://[0::1]:80'));
    expect(Object.keys(limiter.stats()).sort()).toEqual([
      'http://[::1]:80',
      'http://unknown.example:80',
      'https://unknown.example:443',
      'https://unknown.example:8443',
    ]);
  });
});

describe('HostLimiter: gateFor input', () => {
  it('accepts a URL object and full URLs, resolving each like its origin', () => {
    const limiter = new HostLimiter({ partners: [rule()] });
    const gate = limiter.gate('billing');
    expect(limiter.gateFor(new URL('https://api.billing.example/v1/invoices?page=2'))).toBe(gate);
    expect(limiter.gateFor('https://api.billing.example/v1/invoices?page=2#x')).toBe(gate);
    expect(limiter.gateFor('https://user:secret@api.billing.example/')).toBe(gate);
    const unknown = limiter.gateFor('https://other.example');
    expect(limiter.gateFor('https://other.example/a/b/c?d=e')).toBe(unknown);
    expect(limiter.gateFor(new URL('https://other.example/z'))).toBe(unknown);
  });

  it.each([
    ['a malformed URL', 'not a url'],
    ['a scheme without a host', 'http://'],
    ['a bare hostname', 'api.billing.example'],
    ['a hostname with a port', 'api.billing.example:443'],
    ['an out-of-range port', 'https://api.billing.example:99999'],
    ['ftp', 'ftp://x'],
    ['file', 'file:///etc/passwd'],
    ['a URL object with a non-http scheme', new URL('ws://api.billing.example')],
    ['a number', 42],
    ['undefined', undefined],
  ])('rejects %s with a TypeError and creates nothing', (_what, target) => {
    const limiter = new HostLimiter({ partners: [rule()] });
    expect(() => limiter.gateFor(target as string)).toThrow(TypeError);
    // Asking twice: a rejected input must not have been remembered as anything.
    expect(() => limiter.gateFor(target as string)).toThrow(TypeError);
    expect(Object.keys(limiter.stats())).toEqual(['billing']);
  });

  it('answers origin strings built afresh per request (as undici does) with their own gate, in any order', () => {
    const limiter = new HostLimiter({
      partners: [rule(), rule({ name: 'maps', hosts: ['api.maps.example'] })],
    });
    const billing = limiter.gate('billing');
    const maps = limiter.gate('maps');
    const unknown = limiter.gateFor('https://other.example');
    // The last partner origin is remembered: alternate, repeat, and ask between them for an
    // unknown host and for input that must still be refused.
    const asked: [string, Semaphore | undefined][] = [
      ['https://api.billing.example/a', billing],
      ['https://api.billing.example/b', billing],
      ['https://api.maps.example/c', maps],
      ['https://api.billing.example/d', billing],
      ['https://other.example/e', unknown],
      ['https://api.maps.example/f', maps],
      ['https://api.maps.example/g', maps],
    ];
    for (const [url, gate] of asked) {
      expect(limiter.gateFor(new URL(url).origin), url).toBe(gate);
      expect(() => limiter.gateFor(undefined as unknown as string)).toThrow(TypeError);
      expect(() => limiter.gateFor('')).toThrow(TypeError);
    }
  });

  it('names the offending URL and scheme in the error', () => {
    const limiter = new HostLimiter();
    expect(() => limiter.gateFor('ftp://x')).toThrow(/"ftp:".*ftp:\/\/x/);
    expect(() => limiter.gateFor('not a url')).toThrow(/"not a url"/);
  });
});

describe('HostLimiter: unknown hosts', () => {
  it('by default gets a bounded per-origin gate with DEFAULT_UNKNOWN_HOST_GATE, listed by origin', () => {
    const limiter = new HostLimiter({ partners: [rule()] });
    const gate = limiter.gateFor('https://unnamed.example/v1')!;
    expect(gate).toBeInstanceOf(Semaphore);
    expect(gate.name).toBe('https://unnamed.example:443');
    expect(gate.maxHold).toBe(DEFAULT_MAX_HOLD_MS);
    expect(gate.stats()).toMatchObject({
      limit: DEFAULT_UNKNOWN_HOST_GATE.limit,
      maxQueue: DEFAULT_UNKNOWN_HOST_GATE.maxQueue,
      queueTimeout: DEFAULT_UNKNOWN_HOST_GATE.queueTimeout,
    });
    expect([...limiter.gates().keys()]).toEqual(['billing', 'https://unnamed.example:443']);
    expect(limiter.gates().get('https://unnamed.example:443')).toBe(gate);
    expect(Object.keys(limiter.stats())).toEqual(['billing', 'https://unnamed.example:443']);
    // Per-origin gates are not partners.
    expect(limiter.gate('https://unnamed.example:443')).toBeUndefined();
  });

  it('gives each unknown origin its own gate with the configured options', () => {
    const limiter = new HostLimiter({
      unknownHosts: { limit: 2, maxQueue: 4, queueTimeout: 50, maxHold: 1000 },
    });
    const a = limiter.gateFor('https://a.example')!;
    const b = limiter.gateFor('https://b.example')!;
    expect(a).not.toBe(b);
    for (const gate of [a, b]) {
      expect(gate.maxHold).toBe(1000);
      expect(gate.stats()).toMatchObject({ limit: 2, maxQueue: 4, queueTimeout: 50 });
    }
    a.tryAcquire();
    a.tryAcquire();
    expect(a.tryAcquire()).toBeUndefined();
    expect(b.tryAcquire()).toBeDefined();
  });

  it("'reject' throws UnknownHostError naming the origin, creates nothing, and still serves partners", () => {
    const limiter = new HostLimiter({ partners: [rule()], unknownHosts: 'reject' });
    const error = caught(() => limiter.gateFor('https://Evil.Example/steal'));
    expect(error).toBeInstanceOf(UnknownHostError);
    expect((error as UnknownHostError).code).toBe('HOSTGATE_UNKNOWN_HOST');
    expect((error as UnknownHostError).partner).toBe('https://evil.example:443');
    expect((error as Error).message).toContain('https://evil.example:443');
    expect(isShedError(error)).toBe(false); // a configuration refusal, not overload
    // Same answer the second time (whatever is remembered between lookups).
    expect(() => limiter.gateFor('https://Evil.Example/steal')).toThrow(UnknownHostError);
    expect(limiter.gateFor('https://api.billing.example')).toBe(limiter.gate('billing'));
    expect(Object.keys(limiter.stats())).toEqual(['billing']);
  });

  it("'unlimited' returns undefined for unknown hosts and creates nothing", () => {
    const limiter = new HostLimiter({ partners: [rule()], unknownHosts: 'unlimited' });
    expect(limiter.gateFor('https://free.example')).toBeUndefined();
    expect(limiter.gateFor('https://free.example')).toBeUndefined();
    expect(limiter.gateFor(new URL('https://free.example/x'))).toBeUndefined();
    expect(limiter.gateFor('https://api.billing.example')).toBe(limiter.gate('billing'));
    expect(Object.keys(limiter.stats())).toEqual(['billing']);
  });
});

describe('HostLimiter: maxHosts bounds the per-origin gates', () => {
  it('evicts a gate idle for evictIdleAfter to make room; the evicted origin gets a fresh gate later', () => {
    const limiter = new HostLimiter({ maxHosts: 2, evictIdleAfter: 0 });
    const a = limiter.gateFor('https://a.example')!;
    a.tryAcquire()!.release(); // used, now idle: held 0, queued 0
    const b = limiter.gateFor('https://b.example')!;
    const busy = b.tryAcquire()!;
    limiter.gateFor('https://c.example');
    expect(Object.keys(limiter.stats()).sort()).toEqual([
      'https://b.example:443',
      'https://c.example:443',
    ]);
    const freshA = limiter.gateFor('https://a.example')!;
    expect(freshA).not.toBe(a);
    expect(freshA.stats()).toMatchObject({ acquired: 0, held: 0 });
    expect(limiter.gateFor('https://b.example')).toBe(b);
    busy.release();
  });

  it('keeps a recently used idle gate in its place: a new origin shares the overflow gate instead', () => {
    const limiter = new HostLimiter({ maxHosts: 2 }); // evictIdleAfter: 60 s
    const a = limiter.gateFor('https://a.example')!;
    a.tryAcquire()!.release();
    const b = limiter.gateFor('https://b.example')!;
    const c = limiter.gateFor('https://c.example')!;
    const d = limiter.gateFor('https://d.example')!;
    expect(c.name).toBe(OVERFLOW_ORIGINS);
    expect(d).toBe(c);
    expect(limiter.gateFor('https://a.example')).toBe(a);
    expect(limiter.gateFor('https://b.example')).toBe(b);
    expect([...limiter.gates().keys()]).toEqual([
      'https://a.example:443',
      'https://b.example:443',
      OVERFLOW_ORIGINS,
    ]);
  });

  it('never evicts a gate that holds permits or has waiters; the new host queues in the overflow gate', async () => {
    const limiter = new HostLimiter({
      maxHosts: 2,
      evictIdleAfter: 0,
      unknownHosts: { limit: 1 },
    });
    const a = limiter.gateFor('https://a.example')!;
    const b = limiter.gateFor('https://b.example')!;
    const heldA = a.tryAcquire()!;
    const waitingA = a.acquire(); // queued behind heldA
    const heldB = b.tryAcquire()!;
    expect(a.stats()).toMatchObject({ held: 1, queued: 1 });

    const overflow = limiter.gateFor('https://c.example/x')!;
    expect(overflow.name).toBe(OVERFLOW_ORIGINS);
    // The unknownHosts options: a cap of one for the origins in it, and a queue.
    const heldC = overflow.tryAcquire()!;
    const waitingD = limiter.gateFor('https://d.example')!.acquire();
    expect(overflow.stats()).toMatchObject({ limit: 1, held: 1, queued: 1 });
    expect(limiter.stats()['https://a.example:443']).toMatchObject({ acquired: 1, queued: 1 });

    heldA.release(); // the waiter gets it: a is still busy
    const secondA = await waitingA;
    expect(limiter.gateFor('https://c.example')).toBe(overflow);
    expect(limiter.gateFor('https://a.example')).toBe(a);

    secondA.release(); // a is idle now: c may take its slot, b is untouched
    heldC.release();
    (await waitingD).release();
    const c = limiter.gateFor('https://c.example')!;
    expect(c).not.toBe(overflow);
    expect(c.name).toBe('https://c.example:443');
    expect(limiter.gates().get('https://b.example:443')).toBe(b);
    expect(limiter.gates().has('https://a.example:443')).toBe(false);
    heldB.release();
  });

  it('does not count partner gates against maxHosts', () => {
    const limiter = new HostLimiter({
      partners: [rule(), { name: 'search', hosts: ['*.search.example'], limit: 5 }],
      maxHosts: 1,
    });
    const held = limiter.gateFor('https://one.example')!.tryAcquire()!;
    expect(limiter.gateFor('https://two.example')!.name).toBe(OVERFLOW_ORIGINS);
    expect(limiter.gateFor('https://api.billing.example')).toBe(limiter.gate('billing'));
    expect(limiter.gateFor('https://eu.search.example')).toBe(limiter.gate('search'));
    expect(Object.keys(limiter.stats())).toEqual([
      'billing',
      'search',
      'https://one.example:443',
      OVERFLOW_ORIGINS,
    ]);
    held.release();
  });

  it('is DEFAULT_MAX_HOSTS when not set', () => {
    const limiter = new HostLimiter({ evictIdleAfter: 0 });
    const permits: Permit[] = [];
    for (let i = 0; i < DEFAULT_MAX_HOSTS; i++) {
      permits.push(limiter.gateFor(`https://h${i}.example`)!.tryAcquire()!);
    }
    expect(limiter.gateFor('https://one-more.example')!.name).toBe(OVERFLOW_ORIGINS);
    expect(Object.keys(limiter.stats())).toHaveLength(DEFAULT_MAX_HOSTS + 1);
    for (const permit of permits) permit.release();
    expect(limiter.gateFor('https://one-more.example')!.name).toBe('https://one-more.example:443');
    expect(Object.keys(limiter.stats())).toHaveLength(DEFAULT_MAX_HOSTS + 1);
  });

  it('stays bounded under thousands of attacker-chosen origins, some of them held open, and refuses none', () => {
    const maxHosts = 16;
    const limiter = new HostLimiter({
      partners: [rule(), { name: 'search', hosts: ['*.search.example'], limit: 5 }],
      maxHosts,
      evictIdleAfter: 0,
    });
    const partners = 2;
    const random = prng(0x5eed);
    const held: Permit[] = [];
    let ownGate = 0;
    let overflowed = 0;
    for (let i = 0; i < 5000; i++) {
      const url = `https://${randomLabel(random)}.attacker.example/${randomLabel(random)}`;
      const gate = limiter.gateFor(url)!;
      if (gate.name === OVERFLOW_ORIGINS) overflowed++;
      else ownGate++;
      // Most requests finish at once; some stay open, pinning their gate.
      const permit = gate.tryAcquire()!;
      if (random() < 0.3) held.push(permit);
      else permit.release();
      // Open requests finish now and then, in any order.
      if (held.length > 0 && random() < 0.25) {
        held.splice(Math.floor(random() * held.length), 1)[0]!.release();
      }
      expect(Object.keys(limiter.stats()).length).toBeLessThanOrEqual(partners + maxHosts + 1);
    }
    // The schedule exercised both eviction (far more origins served than slots) and overflow.
    expect(ownGate).toBeGreaterThan(10 * maxHosts);
    expect(overflowed).toBeGreaterThan(0);
    // Every held permit's gate survived; the partners were never touched.
    const stats = limiter.stats();
    for (const permit of held) {
      expect(stats[permit.gate.name!]).toMatchObject({ held: permit.gate.held });
      expectBalanced(permit.gate);
    }
    expect(stats.billing).toMatchObject({ acquired: 0, held: 0 });
    expect(limiter.gateFor('https://api.billing.example')).toBe(limiter.gate('billing'));
    for (const permit of held) permit.release();
    expect(limiter.gateFor('https://after.example')!.name).toBe('https://after.example:443');
  });
});

describe('HostLimiter: the resolved-origin cache', () => {
  it.each<[string, HostLimiterOptions, (label: string) => string]>([
    [
      "unknown hosts, 'unlimited'",
      { unknownHosts: 'unlimited' },
      (l) => `https://${l}.cache-probe.example`,
    ],
    [
      'unknown hosts, per-origin gates',
      { maxHosts: 8 },
      (l) => `http://${l}.cache-probe.example:8080`,
    ],
    [
      'hosts matched by a wildcard rule',
      { partners: [rule({ hosts: ['*.cache-probe.example'] })] },
      (l) => `https://${l}.cache-probe.example`,
    ],
  ])('does not grow with the number of distinct origin strings: %s', (_what, options, target) => {
    const limiter = new HostLimiter(options);
    const random = prng(42);
    const feed = (count: number) => () => {
      for (let i = 0; i < count; i++) limiter.gateFor(target(randomLabel(random)));
    };
    const afterFirst = largestMapWhile('cache-probe', feed(20_000));
    const afterMore = largestMapWhile('cache-probe', feed(40_000));
    expect(afterFirst).toBeLessThan(20_000);
    expect(afterMore).toBeLessThanOrEqual(afterFirst);
  });

  it('never answers from a stale entry: an evicted origin gets a fresh gate by the same string', () => {
    const limiter = new HostLimiter({ maxHosts: 1, evictIdleAfter: 0 });
    const first = limiter.gateFor('https://a.example')!;
    expect(limiter.gateFor('https://a.example')).toBe(first);
    limiter.gateFor('https://b.example'); // evicts idle a
    const second = limiter.gateFor('https://a.example')!;
    expect(second).not.toBe(first);
    expect(limiter.gates().get('https://a.example:443')).toBe(second);
    // And a busy origin keeps its place: the remembered string of b now finds the overflow gate.
    const held = second.tryAcquire()!;
    expect(limiter.gateFor('https://b.example')!.name).toBe(OVERFLOW_ORIGINS);
    held.release();
  });
});

describe('HostLimiter: construction errors name the rule or option', () => {
  it('accepts no options at all', () => {
    expect(new HostLimiter().stats()).toEqual({});
  });

  it.each<[string, unknown, RegExp]>([
    ['options that are not an object', null, /HostLimiter options must be an options object/],
    ['an unknown top-level option', { maxHost: 5 }, /unknown option "maxHost"/],
    ['partners that are not an array', { partners: {} }, /partners must be an array/],
    ['a rule that is not an object', { partners: [null] }, /partners\[0\]/],
    [
      'a rule without a name',
      { partners: [{ hosts: ['a.example'], limit: 1 }] },
      /partners\[0\]: name/,
    ],
    [
      'an empty name',
      { partners: [rule({ name: '' })] },
      /partners\[0\]: name must be a non-empty string/,
    ],
    [
      'a duplicate partner name',
      { partners: [rule(), rule({ hosts: ['other.example'] })] },
      /partner "billing": the name is used by another rule/,
    ],
    [
      'a typo in a rule option',
      { partners: [rule({ limt: 20 })] },
      /partner "billing": unknown option "limt"/,
    ],
    [
      'empty hosts',
      { partners: [rule({ hosts: [] })] },
      /partner "billing": hosts must be a non-empty array/,
    ],
    ['missing hosts', { partners: [{ name: 'billing', limit: 1 }] }, /partner "billing": hosts/],
    [
      'hosts as a string',
      { partners: [rule({ hosts: 'a.example' as never })] },
      /partner "billing": hosts/,
    ],
    [
      'a zero limit',
      { partners: [rule({ limit: 0 })] },
      /partner "billing": limit must be a positive integer, got 0/,
    ],
    ['a negative limit', { partners: [rule({ limit: -5 })] }, /partner "billing": limit .*-5/],
    ['a fractional limit', { partners: [rule({ limit: 1.5 })] }, /partner "billing": limit .*1\.5/],
    [
      'a string limit',
      { partners: [rule({ limit: '20' as never })] },
      /partner "billing": limit .*"20"/,
    ],
    [
      'a missing limit',
      { partners: [{ name: 'billing', hosts: ['a.example'] }] },
      /partner "billing": limit/,
    ],
    ['a negative maxQueue', { partners: [rule({ maxQueue: -1 })] }, /partner "billing": maxQueue/],
    [
      'a zero queueTimeout',
      { partners: [rule({ queueTimeout: 0 })] },
      /partner "billing": queueTimeout/,
    ],
    ['a negative maxHold', { partners: [rule({ maxHold: -1 })] }, /partner "billing": maxHold/],
    ['an unknown unknownHosts policy', { unknownHosts: 'deny' }, /unknownHosts .*"deny"/],
    ['unknownHosts: null', { unknownHosts: null }, /unknownHosts/],
    ['unknownHosts without a limit', { unknownHosts: { maxQueue: 5 } }, /unknownHosts: limit/],
    [
      'a bad unknownHosts limit',
      { unknownHosts: { limit: 0 } },
      /unknownHosts: limit must be a positive integer/,
    ],
    [
      'a typo in unknownHosts',
      { unknownHosts: { limit: 5, limt: 5 } },
      /unknownHosts: unknown option "limt"/,
    ],
    ['a zero maxHosts', { maxHosts: 0 }, /maxHosts must be a positive integer, got 0/],
    ['a negative maxHosts', { maxHosts: -1 }, /maxHosts .*-1/],
    ['a fractional maxHosts', { maxHosts: 2.5 }, /maxHosts .*2\.5/],
    ['an infinite maxHosts', { maxHosts: Number.POSITIVE_INFINITY }, /maxHosts .*Infinity/],
    ['a string maxHosts', { maxHosts: '256' }, /maxHosts .*"256"/],
    ['a negative evictIdleAfter', { evictIdleAfter: -1 }, /evictIdleAfter .*-1/],
    ['a string evictIdleAfter', { evictIdleAfter: '60s' }, /evictIdleAfter .*"60s"/],
  ])('rejects %s', (_what, options, message) => {
    expect(() => construct(options)).toThrow(TypeError);
    expect(() => construct(options)).toThrow(message);
  });

  it.each([
    ['an empty string', ''],
    ['whitespace', '   '],
    ['a scheme without a host', 'http://'],
    ['a port without a scheme', 'api.billing.example:8080'],
    ['a bracketed IPv6 literal with a port', '[::1]:8080'],
    ['a double wildcard', '*.*.billing.example'],
    ['a wildcard inside a label', 'a*.billing.example'],
    ['a lone wildcard', '*'],
    ['a wildcard with nothing after it', '*.'],
    ['an origin with a path', 'https://api.billing.example/v1'],
    ['an origin with a query', 'https://api.billing.example/?x=1'],
    ['an origin with a user', 'https://user@api.billing.example'],
    ['an origin with only a password', 'https://:secret@api.billing.example'],
    ['a hostname with a query', 'api.billing.example?x=1'],
    ['a hostname with a space', 'api billing.example'],
    ['a leading dot', '.billing.example'],
    ['an empty label', 'api..billing.example'],
    ['an origin with an empty label', 'https://api..billing.example'],
    ['an invalid port', 'https://api.billing.example:99999'],
    ['an ftp origin', 'ftp://billing.example'],
    ['a websocket origin', 'ws://billing.example'],
    ['a non-string', 42],
  ])('rejects a host that is %s, naming the rule and the host', (_what, host) => {
    const make = () => construct({ partners: [rule({ hosts: ['ok.example', host as string] })] });
    expect(make).toThrow(TypeError);
    expect(make).toThrow('partner "billing"');
    if (typeof host === 'string' && host.trim() !== '') expect(make).toThrow(JSON.stringify(host));
  });

  it('names the scheme when it is not http(s)', () => {
    expect(() => construct({ partners: [rule({ hosts: ['ftp://billing.example'] })] })).toThrow(
      /"ftp:"/,
    );
  });

  it.each([
    ['the same hostname, differently spelt', 'API.billing.example', 'api.billing.example.'],
    [
      'the same origin, with and without its default port',
      'https://billing.example',
      'https://billing.example:443/',
    ],
    ['the same http origin', 'HTTP://billing.example:80', 'http://billing.example'],
    ['the same wildcard', '*.billing.example', '*.Billing.Example.'],
    ['the same IPv6 host', '::1', '[0::1]'],
    ['the same IDN host', 'bücher.example', 'xn--bcher-kva.example'],
  ])('rejects a host claimed by two rules: %s', (_what, first, second) => {
    const make = () =>
      construct({
        partners: [
          { name: 'a', hosts: [first], limit: 1 },
          { name: 'b', hosts: ['other.example', second], limit: 1 },
        ],
      });
    expect(make).toThrow(TypeError);
    expect(make).toThrow(
      `partner "b": host ${JSON.stringify(second)} is already claimed by partner "a"`,
    );
  });

  it('lets different kinds of pattern for the same name coexist (the most specific wins)', () => {
    const limiter = new HostLimiter({
      partners: [
        { name: 'exact', hosts: ['https://billing.example'], limit: 1 },
        { name: 'host', hosts: ['billing.example'], limit: 1 },
        { name: 'subdomains', hosts: ['*.billing.example'], limit: 1 },
      ],
    });
    expect(limiter.gateFor('https://billing.example')).toBe(limiter.gate('exact'));
    expect(limiter.gateFor('http://billing.example')).toBe(limiter.gate('host'));
    expect(limiter.gateFor('http://api.billing.example')).toBe(limiter.gate('subdomains'));
  });
});
