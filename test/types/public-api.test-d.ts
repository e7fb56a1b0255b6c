// Type tests: `npm run typecheck` (tsc over test/) fails when one of these stops compiling.
import { Agent, Client, Pool } from 'undici';
import { Agent as Agent8, Client as Client8, Pool as Pool8 } from 'undici8';
import { describe, expectTypeOf, it } from 'vitest';
import {
  HostLimiter,
  LimitedAgent,
  limitGate,
  limitHosts,
  Semaphore,
  withDispatcher,
} from '../../src/index.js';

const limiter = new HostLimiter({ partners: [{ name: 'p', hosts: ['p.test'], limit: 2 }] });
const gate = new Semaphore({ limit: 1 });

describe('compose accepts limitHosts and limitGate without a cast', () => {
  it('on undici 7 Agent, Pool and Client', () => {
    new Agent().compose(limitHosts(limiter));
    new Agent().compose([limitHosts(limiter), limitGate(gate)]);
    new Pool('http://p.test').compose(limitHosts(limiter), limitGate(gate));
    new Client('http://p.test').compose(limitHosts(limiter));
  });
  it('on undici 8 Agent, Pool and Client', () => {
    new Agent8().compose(limitHosts(limiter));
    new Agent8().compose([limitHosts(limiter), limitGate(gate)]);
    new Pool8('http://p.test').compose(limitHosts(limiter), limitGate(gate));
    new Client8('http://p.test').compose(limitHosts(limiter));
  });
});

describe("withDispatcher types Node's global fetch with a dispatcher", () => {
  it('takes an undici 7 or 8 dispatcher, composed or not', () => {
    void fetch('http://p.test', withDispatcher(new Agent().compose(limitHosts(limiter))));
    void fetch('http://p.test', withDispatcher(new Pool('http://p.test'), { method: 'POST' }));
    void fetch('http://p.test', withDispatcher(new Agent8().compose(limitHosts(limiter))));
    // @ts-expect-error not a dispatcher
    withDispatcher({ dispatcher: new Agent() });
  });
});

describe('Semaphore.run', () => {
  it('types the signal as present in the callback when one is passed', () => {
    const ac = new AbortController();
    void gate.run(
      (signal) => {
        expectTypeOf(signal).toEqualTypeOf<AbortSignal>();
        return signal.aborted;
      },
      { signal: ac.signal, timeout: 100 },
    );
    void gate.run((signal) => {
      expectTypeOf(signal).toEqualTypeOf<AbortSignal | undefined>();
    });
    void gate.run((signal) => expectTypeOf(signal).toEqualTypeOf<AbortSignal | undefined>(), {
      timeout: 100,
    });
  });
  it('refuses a callback that needs a signal when none is passed', () => {
    // @ts-expect-error no signal in the options: the callback may get undefined
    void gate.run((signal: AbortSignal) => signal.aborted, { timeout: 100 });
  });
  it('resolves to what the callback returns', () => {
    expectTypeOf(gate.run(() => 42)).toEqualTypeOf<Promise<number>>();
    expectTypeOf(gate.run(async () => 'x')).toEqualTypeOf<Promise<string>>();
  });
});

describe('LimitedAgent wraps an undici 7 or 8 dispatcher', () => {
  it('takes an Agent, Pool or Client of either version', () => {
    new LimitedAgent(new Agent(), limiter);
    new LimitedAgent(new Pool('http://p.test'), { partners: [] });
    new LimitedAgent(new Agent8(), limiter);
    new LimitedAgent(new Client8('http://p.test'), limiter);
    void fetch('http://p.test', withDispatcher(new LimitedAgent(new Agent(), limiter)));
  });
});
