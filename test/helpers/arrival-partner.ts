/**
 * A partner in a process of its own that logs the arrival time of every request (its own
 * `performance.now()`), so the windows over its log see the partner's clock only: no event loop
 * shared with the client under test. `?cap=n&ms=t` answers 200 after `ms` while fewer than `n`
 * are in progress and 503 at once past that (the adaptive tests' refusing partner).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';

const SCRIPT = `
import http from 'node:http';
const arrivals = [];
const statuses = [];
const ids = [];
let active = 0;
const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname === '/log') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ arrivals, statuses, ids }));
    arrivals.length = 0;
    statuses.length = 0;
    ids.length = 0;
    return;
  }
  const at = performance.now();
  arrivals.push(at);
  const id = url.searchParams.get('id');
  if (id !== null) ids.push([id, performance.timeOrigin + at]);
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

export interface PartnerLog {
  arrivals: number[];
  statuses: [number, number][];
  ids: [string, number][];
}

export interface ArrivalPartner {
  origin: string;
  /**
   * Since the last read: arrival times (partner's clock, ascending), answers `[time, status]`,
   * and `[id, epoch ms]` for requests with `?id=` (epoch: `performance.timeOrigin + now`, so a
   * client's send times on the same host pair with them to within a ms).
   */
  log(): Promise<PartnerLog>;
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
      return (await res.json()) as PartnerLog;
    },
    async close() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.stdin!.end();
      await exited;
    },
  };
}
