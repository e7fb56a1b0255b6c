// Type tests: `npm run typecheck` (tsc over test/) fails when one of these stops compiling. They
// pin the priority-class snippet of docs/priorities-and-deadlines.md, which needed casts before.
import { Agent, type Dispatcher, request } from 'undici';
import { describe, expectTypeOf, it } from 'vitest';
import { outbound } from '../../middleware/index.js';
import { HostLimiter, limitFetch, limitHosts } from '../../src/index.js';

const limiter = new HostLimiter({ partners: [{ name: 'p', hosts: ['p.test'], limit: 2 }] });
const url = 'http://p.test/';

describe('priorityClass is a typed request option', () => {
  it("in undici's request and dispatch options", async () => {
    const dispatcher = new Agent().compose(limitHosts(limiter));
    await request(url, { dispatcher, priorityClass: 'batch' });
    expectTypeOf<Dispatcher.DispatchOptions['priorityClass']>().toEqualTypeOf<string | undefined>();
  });
  it("in limitFetch's init, which keeps fetch's own signature otherwise", async () => {
    const limited = limitFetch(fetch, limiter);
    const res = await limited(url, { priorityClass: 'batch', method: 'GET' });
    expectTypeOf(res).toEqualTypeOf<Response>();
    // Still usable where a plain fetch is expected (an SDK's `fetch` option).
    const asFetch: typeof fetch = limited;
    expectTypeOf(asFetch).toBeFunction();
  });
});

describe("outbound()'s priority function gets Express's request", () => {
  it('reads req.path without a cast', () => {
    outbound({
      limiter,
      priority: (req) => (req.path.startsWith('/export') ? 'batch' : undefined),
    });
    outbound({ limiter, deadline: (req) => (req.query.fast ? 100 : undefined) });
  });
});
