import { Agent, fetch } from 'undici';
import { describe, expect, it } from 'vitest';
import { outbound } from '../../middleware/index.js';
import { HostLimiter, LimitedAgent, limitFetch, limitHosts } from '../../src/index.js';

// Issue 23: `limitHosts(undefined)` and `limitFetch(fetch, undefined)` silently built a default
// limiter; a missing limiter is a mistake to report, not a configuration.
describe('entry points refuse a missing limiter', () => {
  const bad: [string, unknown, RegExp][] = [
    ['undefined', undefined, /got undefined/],
    ['null', null, /got null/],
    ['a number', 20, /got 20/],
    ['an array', [], /got an array/],
  ];

  it.each(bad)('limitHosts(%s) throws a TypeError', (_, value, message) => {
    expect(() => limitHosts(value as HostLimiter)).toThrow(TypeError);
    expect(() => limitHosts(value as HostLimiter)).toThrow(message);
    expect(() => limitHosts(value as HostLimiter)).toThrow(/^limitHosts: expected a HostLimiter/);
  });

  it.each(bad)('limitFetch(fetch, %s) throws a TypeError', (_, value, message) => {
    expect(() => limitFetch(fetch, value as HostLimiter)).toThrow(TypeError);
    expect(() => limitFetch(fetch, value as HostLimiter)).toThrow(message);
  });

  it.each(bad)('new LimitedAgent(agent, %s) throws a TypeError', async (_, value, message) => {
    const agent = new Agent();
    expect(() => new LimitedAgent(agent, value as HostLimiter)).toThrow(TypeError);
    expect(() => new LimitedAgent(agent, value as HostLimiter)).toThrow(message);
    await agent.close();
  });

  it("outbound({ limiter: null }) throws a TypeError naming 'limiter'", () => {
    expect(() => outbound({ limiter: null as unknown as HostLimiter })).toThrow(
      /^outbound: limiter: expected a HostLimiter .* got null/,
    );
  });

  it('still takes a HostLimiter or its options', () => {
    const limiter = new HostLimiter({ partners: [] });
    expect(typeof limitHosts(limiter)).toBe('function');
    expect(typeof limitHosts({ unknownHosts: 'reject' })).toBe('function');
    expect(typeof limitFetch(fetch, { unknownHosts: 'reject' })).toBe('function');
  });
});
