/**
 * What the gate's own code costs per request, with no socket, parser or partner: LimitedAgent and
 * the bare gate (bare-gate.ts) over a fake inner dispatcher that answers every request it holds
 * from a loop (onConnect, onHeaders, onData, onComplete, as undici's callback API does), against
 * that fake alone. `npx tsx bench/dispatcher/handler-cost.ts [--src]`: CPU ns per request, not
 * binding (64 at a time, limit 10,000) and binding (200 at a time, limit 20: each grant through
 * its own immediate, as over a real Agent). Run `npm run build` first (or pass `--src`).
 *
 * Everything here stays in the CPU's caches, so these are lower bounds: in bench/dispatcher.ts
 * the same work sits between undici's and Node's, and costs the client several times as much.
 */
import { Dispatcher } from 'undici';
import { BareGate } from './bare-gate.js';

// `--smoke` (npm test): a few rounds from the sources, to keep the script from rotting.
const smoke = process.argv.includes('--smoke');
const from = smoke || process.argv.includes('--src') ? 'src' : 'dist';
const entry = new URL(
  from === 'src' ? '../../src/index.ts' : '../../dist/src/index.js',
  import.meta.url,
).href;
const { HostLimiter, LimitedAgent } = (await import(entry)) as typeof import('../../src/index.js');

interface CallbackHandler {
  onConnect(abort: (reason?: Error) => void): void;
  onHeaders(status: number, headers: Buffer[], resume: () => void, text: string): boolean;
  onData(chunk: Buffer): boolean;
  onComplete(trailers: string[] | null): void;
}

const origin = 'http://127.0.0.1:8080';
const rawHeaders = [Buffer.from('content-length'), Buffer.from('2')];
const body = Buffer.from('ok');
const noop = () => {};

/** Holds what it is sent and answers all of it when told to. */
class FakeDispatcher extends Dispatcher {
  #held: CallbackHandler[] = [];

  override dispatch(_opts: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler) {
    this.#held.push(handler as unknown as CallbackHandler);
    return true;
  }

  answerAll(): number {
    const held = this.#held;
    this.#held = [];
    for (const handler of held) {
      handler.onConnect(noop);
      handler.onHeaders(200, rawHeaders, noop, 'OK');
      handler.onData(body);
      handler.onComplete(null);
    }
    return held.length;
  }
}

/** The caller's end: undici's request() handler, reduced to the callbacks. */
class Caller implements CallbackHandler {
  onConnect(): void {}
  onHeaders(): boolean {
    return true;
  }
  onData(): boolean {
    return true;
  }
  onComplete(): void {}
  onError(error: Error): void {
    throw error;
  }
}

async function measure(kind: 'fake' | 'bare' | 'LimitedAgent', binding: boolean): Promise<number> {
  const limit = binding ? 20 : 10_000;
  const inFlight = binding ? 200 : 64;
  const fake = new FakeDispatcher();
  const limiter = new HostLimiter({
    partners: [{ name: 'bench', hosts: [origin], limit, maxQueue: 100_000, queueTimeout: 60_000 }],
  });
  const dispatcher: Dispatcher =
    kind === 'fake'
      ? fake
      : kind === 'bare'
        ? new BareGate(fake, limit)
        : new LimitedAgent(fake, limiter);
  const caller = new Caller() as unknown as Dispatcher.DispatchHandler;
  const round = async () => {
    for (let i = 0; i < inFlight; i++) {
      // A fresh options object per request, as undici's request() builds one.
      dispatcher.dispatch({ origin, path: '/', method: 'GET' }, caller);
    }
    let answered = 0;
    while (answered < inFlight) {
      answered += fake.answerAll();
      // Granted requests reach the fake from their immediates.
      if (answered < inFlight) await new Promise((resolve) => setImmediate(resolve));
    }
  };
  for (let i = 0; i < (smoke ? 5 : 500); i++) await round();
  const rounds = smoke ? 5 : 3_000;
  const cpu = process.cpuUsage();
  for (let i = 0; i < rounds; i++) await round();
  const used = process.cpuUsage(cpu);
  return ((used.user + used.system) * 1000) / (rounds * inFlight);
}

console.log(`# the gate's own CPU per request, no I/O — Node ${process.version}, from ${from}\n`);
console.log('| case | fake dispatcher alone | bare gate | LimitedAgent |');
console.log('|---|--:|--:|--:|');
for (const binding of [false, true]) {
  const ns = async (kind: 'fake' | 'bare' | 'LimitedAgent') => {
    const runs = [await measure(kind, binding), await measure(kind, binding)];
    return `${Math.round(Math.min(...runs))} ns`;
  };
  const label = binding ? 'binding (200 callers, limit 20)' : 'not binding (64 at a time)';
  console.log(
    `| ${label} | ${await ns('fake')} | ${await ns('bare')} | ${await ns('LimitedAgent')} |`,
  );
}
if (smoke) console.log('\nsmoke: OK');
