/**
 * A partner in a process of its own that logs the arrival time of every request (its own
 * `performance.now()`), so the windows over its log see the partner's clock only: no event loop
 * shared with the client under test. `/503?cap=n` answers 200 after `ms` while fewer than `n`
 * are in progress and 503 at once past that (the adaptive tests' refusing partner).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';

const SCRIPT = `
import http from 'node:http';
const arrivals = [];
const statuses = [];
let active = 0;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname === '/log') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ arrivals, statuses }));
    arrivals.length = 0;
    statuses.length = 0;
    return;
  }
  const at = performance.now();
  arrivals.push(at);
  const cap = Number(url.searchParams.get('cap') ?? Infinity);
  const ms = Number(url.searchParams.get('ms') ?? 0);
  if (active >= cap) {
    statuses.push([at, 503]);
    res.statusCode = 503;
    res.end('busy');
    return;
  }
  active++;
  const answer = () => {
    active--;
    statuses.push([performance.now(), 200]);
    res.end('ok');
  };
  if (ms > 0) setTimeout(answer, ms);
  else answer();
});
server.keepAliveTimeout = 10000;
server.listen(0, '127.0.0.1', () => process.stdout.write(server.address().port + '\\n'));
process.on('disconnect', () => process.exit(0));
process.stdin.on('end', () => process.exit(0));
process.stdin.resume();
`;

export interface ArrivalPartner {
  origin: string;
  /** Arrival times since the last read (partner's clock, ascending) and answers [time, status]. */
  log(): Promise<{ arrivals: number[]; statuses: [number, number][] }>;
  close(): Promise<void>;
}

export async function startArrivalPartner(): Promise<ArrivalPartner> {
  const child: ChildProcess = spawn(process.execPath, ['--input-type=module', '-e', SCRIPT], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
  const origin = `http://127.0.0.1:${Number.parseInt(chunk.toString(), 10)}`;
  return {
    origin,
    async log() {
      const res = await fetch(`${origin}/log`);
      return (await res.json()) as { arrivals: number[]; statuses: [number, number][] };
    },
    async close() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.stdin!.end();
      await exited;
    },
  };
}
