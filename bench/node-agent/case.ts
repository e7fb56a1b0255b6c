/**
 * One case of bench/node-agent.ts, in a fresh process: `case.ts <case> <port> [dist|src] [smoke]`.
 * `<plain|gated>-<free|bound>[-5ms]`: a plain `http.Agent({ keepAlive, maxSockets: cap })`, or
 * the same agent inside a `LimitedHttpAgent` whose partner gate has the same cap.
 */
import http from 'node:http';
import { sendResult, stealMs, stolenPercent } from '../lib/child.js';

const [name = '', portText, from = 'dist', size] = process.argv.slice(2);
const entry = new URL(
  from === 'src' ? '../../src/index.ts' : '../../dist/src/index.js',
  import.meta.url,
).href;
const { HostLimiter, LimitedHttpAgent } = (await import(
  entry
)) as typeof import('../../src/index.js');
const origin = `http://127.0.0.1:${portText}`;
const smoke = size === 'smoke';
const slow = name.endsWith('-5ms');
const binding = name.includes('-bound');
/** Free: 64 callers and a cap of 64 (the gate's own cost). Bound: 200 callers, a cap of 20. */
const cap = binding ? 20 : 64;
const callers = binding ? 200 : 64;
const requests = smoke ? 300 : slow ? 6_000 : 30_000;
const warmup = smoke ? 50 : slow ? 2_000 : 10_000;
const path = slow ? '/slow?ms=5' : '/';

const plain = new http.Agent({ keepAlive: true, maxSockets: cap });
const agent = name.startsWith('gated')
  ? new LimitedHttpAgent(
      plain,
      new HostLimiter({
        partners: [
          { name: 'bench', hosts: [origin], limit: cap, maxQueue: 1_000, queueTimeout: 60_000 },
        ],
      }),
    )
  : plain;

function get(): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${origin}${path}`, { agent }, (res) => {
      res.resume();
      res.on('end', resolve);
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

/** Requests per second with `callers` looping until `total` requests are done. */
async function run(total: number): Promise<number> {
  let started = 0;
  const worker = async () => {
    while (started < total) {
      started++;
      await get();
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: callers }, worker));
  return (total / (performance.now() - t0)) * 1000;
}

await run(warmup);
const cpu = process.cpuUsage();
const steal = stealMs();
const t0 = performance.now();
const reqPerSec = await run(requests);
const stolen = stolenPercent(steal, performance.now() - t0);
const used = process.cpuUsage(cpu);
plain.destroy();
await sendResult({
  reqPerSec,
  cpuUsPerRequest: (used.user + used.system) / requests,
  stolen,
});
