/**
 * Issue 36 item 4: no part of a credential in a URL reaches any report. The origin of a permit
 * used to strip userinfo up to the FIRST '@' while URLs split at the LAST: the reviewer's forms
 * put the token into `permit.request.origin`, `limiter.leaks()`, `onLeak` and the status page.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { statusHandler } from '../../middleware/index.js';
import { permitTarget } from '../../src/gate/permit-target.js';
import {
  detectLeaks,
  HostLimiter,
  type LeakSuspect,
  LimitedAgent,
  LimitedHttpAgent,
  limitFetch,
} from '../../src/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';

const SECRET = /s3cret|tok3n|alice|corp\.com|hunter2|%40/i;

/** The reviewer's forms, each with a secret the reports must not show (any case). */
function forms(hostPort: string): string[] {
  return [
    `http://alice@corp.com:S3CRET-TOK3N@${hostPort}/held`,
    `http://alice:S3CRET@TOK3N@${hostPort}/held`, // a token containing '@'
    `http://alice:S3CRET@@TOK3N@${hostPort}/held`,
    `http://alice:hunter2@${hostPort}/held`,
    `http://:S3CRET@${hostPort}/held`,
    `http://alice%40corp.com:S3CRET%40TOK3N@${hostPort}/held`,
    `HTTP://ALICE@CORP.COM:S3CRET-TOK3N@${hostPort.toUpperCase()}/held?token=S3CRET#TOK3N`,
    `http:\\\\alice:S3CRET@${hostPort}\\held`,
  ];
}

/**
 * A fetch as node-fetch, axios or got behave: it accepts a URL with credentials and sends them
 * as Basic auth (undici's fetch refuses such a URL, which leaves nothing to leak).
 */
function credentialFetch(agent: Agent) {
  return (input: string, init?: { signal?: AbortSignal | null }) => {
    const url = new URL(input);
    const auth = Buffer.from(
      `${decodeURIComponent(url.username)}:${decodeURIComponent(url.password)}`,
    ).toString('base64');
    url.username = '';
    url.password = '';
    return undiciFetch(url, {
      ...init,
      dispatcher: agent,
      headers: { authorization: `Basic ${auth}` },
    });
  };
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('credentials in URLs reach no report (issue 36 item 4)', () => {
  it('permitTarget keeps only the host the URL parser finds, for each of the reviewer’s forms', () => {
    for (const url of forms('host.example:8080')) {
      const target = permitTarget({ method: 'GET', origin: url });
      expect(target?.origin, url).toBe('http://host.example:8080');
      expect(target?.path, url).toBe('/held');
      expect(JSON.stringify(target), url).not.toMatch(SECRET);
    }
    // What no parser accepts reports no origin at all, rather than a guess.
    expect(permitTarget({ origin: 'http://a@b:c@[::1' })?.origin).toBe('');
  });

  it('through limitFetch: diagnostics channels, limiter.leaks(), onLeak, the status page (HTML and JSON)', async () => {
    const partner: Partner = await startPartner();
    cleanups.push(() => partner.close());
    const agent = new Agent({ keepAliveTimeout: 1000 });
    cleanups.push(() => agent.destroy());
    const hostPort = partner.origin.slice('http://'.length);
    // Unknown host (as a user-supplied URL is), leak threshold short enough for a test.
    const limiter = new HostLimiter({ unknownHosts: { limit: 50, maxHold: 2000 } });
    const limited = limitFetch(credentialFetch(agent), limiter);

    const seen: string[] = [];
    const channels = [
      'hostgate:response',
      'hostgate:release',
      'hostgate:request-error',
      'hostgate:leak',
    ];
    const onMessage = (message: unknown) => {
      const m = message as { permit?: { request?: unknown }; suspect?: unknown };
      seen.push(JSON.stringify(m.permit?.request ?? null), JSON.stringify(m.suspect ?? null));
    };
    for (const name of channels) subscribe(name, onMessage);
    cleanups.push(() => {
      for (const name of channels) unsubscribe(name, onMessage);
    });
    const leaks: LeakSuspect[] = [];
    const urls = forms(hostPort);
    const allLeaked = new Promise<void>((resolve) => {
      const detector = detectLeaks(limiter, {
        leakWarnAfter: 1000, // the gate's own (maxHold / 2): limiter.leaks() lists them too
        onLeak: (suspect) => {
          leaks.push(suspect);
          if (leaks.length === urls.length) resolve();
        },
      });
      cleanups.push(() => detector.close());
    });

    const calls = urls.map((url) => limited(url).then((res) => res.text()));
    await partner.waitForArrived(urls.length);
    await allLeaked;

    // Every form was sent to the partner, under one per-origin gate: the parser's host.
    expect([...limiter.gates().keys()]).toEqual([partner.origin]);
    expect(leaks.map((l) => l.origin)).toEqual(Array(urls.length).fill(partner.origin));
    const suspects = limiter.leaks();
    expect(suspects).toHaveLength(urls.length);
    const page = http.createServer(statusHandler(limiter));
    page.listen(0, '127.0.0.1');
    await once(page, 'listening');
    cleanups.push(() => new Promise((r) => page.close(r)));
    const pageUrl = `http://127.0.0.1:${(page.address() as AddressInfo).port}/`;
    const html = await (await undiciFetch(pageUrl, { dispatcher: agent })).text();
    const json = await (await undiciFetch(`${pageUrl}?format=json`, { dispatcher: agent })).text();

    partner.openHeld();
    await Promise.all(calls);
    expect(seen.length).toBeGreaterThan(0);
    for (const text of [...seen, JSON.stringify(leaks), JSON.stringify(suspects), html, json]) {
      expect(text).not.toMatch(SECRET);
    }
    expect(html).toContain(partner.origin);
  });
});

describe('a URL hostgate refuses names no credential in its error', () => {
  /** Not http(s), or no parser accepts them: each with userinfo and a query token. */
  const refused = [
    'ftp://alice:hunter2@files.example/x?token=S3CRET',
    'ws://alice:hunter2@h.example/?access_token=S3CRET#TOK3N',
    'http://alice:hunter2@[::1/x?token=S3CRET',
    'http://alice:hunter2@exa mple.com/?token=S3CRET',
    'http:\\\\alice:hunter2@exa mple.com\\x?token=S3CRET',
    'alice:hunter2@files.example/x?token=S3CRET', // no scheme: "alice:" parses as one
    'ALICE@files.example/x?token=S3CRET',
    'file:///etc/passwd?token=S3CRET',
  ];

  it('HostLimiter.gateFor, limitFetch, LimitedAgent: the TypeError keeps the host, not the userinfo or query', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'ledger', hosts: ['ledger.example'], limit: 1 }],
    });
    const limited = limitFetch(async () => new Response('never called'), limiter);
    const dispatcher = new LimitedAgent(new Agent(), limiter);
    cleanups.push(() => dispatcher.destroy());
    for (const url of refused) {
      let thrown: unknown;
      try {
        limiter.gateFor(url);
      } catch (error) {
        thrown = error;
      }
      expect(thrown, url).toBeInstanceOf(TypeError);
      const messages = [(thrown as Error).message];
      const rejected = await limited(url).catch((error: Error) => error);
      expect(rejected, url).toBeInstanceOf(TypeError);
      messages.push((rejected as Error).message);
      const failed = await new Promise<Error>((resolve) => {
        dispatcher.dispatch({ origin: url, path: '/', method: 'GET' }, {
          onResponseError: (_controller: unknown, error: Error) => resolve(error),
        } as never);
      });
      messages.push(failed.message);
      for (const message of messages) expect(message, url).not.toMatch(SECRET);
    }
    // Still says what was refused, and where to.
    const ftp = await limited(refused[0]!).catch((error: Error) => error.message);
    expect(ftp).toMatch(/unsupported protocol "ftp:" in "ftp:\/\/…@files\.example\/x…"/);
  });

  it('limitFetch: a redirect to a Location no parser accepts fails without its userinfo or query, cause included', async () => {
    const location = 'http://alice:hunter2@[::1/next?X-Amz-Signature=S3CRET';
    const limited = limitFetch(
      async () => new Response(null, { status: 302, headers: { location } }),
      new HostLimiter(),
    );
    const error = await limited('http://127.0.0.1:1/start').catch((e: Error) => e);
    expect(error).toBeInstanceOf(TypeError);
    const chain: unknown[] = [];
    for (let e: unknown = error; e instanceof Error; e = e.cause) chain.push(e, { ...e });
    expect(chain.length).toBeGreaterThan(2); // fetch failed, and why
    expect(JSON.stringify(chain.map((e) => (e instanceof Error ? e.message : e)))).not.toMatch(
      SECRET,
    );
  });

  it('LimitedHttpAgent: a host no URL parser accepts fails the request without its userinfo', async () => {
    const agent = new LimitedHttpAgent(new http.Agent(), new HostLimiter());
    cleanups.push(() => agent.destroy());
    const error = await new Promise<Error>((resolve) => {
      const req = http.request({ host: 'alice:hunter2@files.example', port: 80, agent });
      req.on('error', resolve);
      req.end();
    });
    expect(error).toBeInstanceOf(TypeError);
    expect(error.message).not.toMatch(SECRET);
  });
});
