/** Issue 10 item 13: `maxHold` bounds the time without response progress, per permit. */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts, PermitHoldTimeoutError } from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';

const loop = useLoopback();

function setup(options: { maxHold: number; maxHoldTotal?: number }) {
  const limiter = new HostLimiter({
    partners: [{ name: 'partner', hosts: [loop.partner.origin], limit: 2, ...options }],
    unknownHosts: 'reject',
  });
  const dispatcher = loop.agent.compose(limitHosts(limiter));
  return { gate: limiter.gate('partner')!, dispatcher };
}

describe('item 13: maxHold kills healthy long streams', () => {
  it('keeps a stream that sends for twice maxHold, and cuts a silent one beside it', async () => {
    const { gate, dispatcher } = setup({ maxHold: 1000 });
    // 60 chunks 35 ms apart: 2.1 s in all, never 1 s without a byte (even on a loaded machine).
    const streaming = request(`${loop.partner.url}/drip?every=35&count=60`, { dispatcher });
    const stalled = await request(`${loop.partner.url}/stall`, { dispatcher });
    const cut = stalled.body.text().then(
      () => undefined,
      (error: unknown) => error,
    );
    const { body } = await streaming;
    expect(await body.text()).toBe('.'.repeat(60));
    const error = await cut;
    expect(error).toBeInstanceOf(PermitHoldTimeoutError);
    expect(gate.stats()).toMatchObject({ held: 0, holdTimeouts: 1 });
    expectInvariant(gate);
  });

  it('cuts even a stream that makes progress at maxHoldTotal, when a partner asks for it', async () => {
    const { gate, dispatcher } = setup({ maxHold: 5000, maxHoldTotal: 300 });
    const { body } = await request(`${loop.partner.url}/drip?every=20&count=1000`, { dispatcher });
    await expect(body.text()).rejects.toBeInstanceOf(PermitHoldTimeoutError);
    expect(gate.stats()).toMatchObject({ held: 0, holdTimeouts: 1 });
    expectInvariant(gate);
  });
});
