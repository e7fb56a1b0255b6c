/**
 * Loopback servers an attacker points a service at, for test/hostile/: each is its own origin
 * (127.0.0.1 on a port of its own), because only 127.0.0.1 may be used.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface HostileServers {
  /** One origin per server: `http://127.0.0.1:<port>`. */
  readonly origins: string[];
  /** Requests that arrived, over every server. */
  readonly arrived: number;
  /** Resolves once `arrived` reaches `n`. */
  waitForArrived(n: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * `count` servers, each answering every request with `answer` (default: never, a request that
 * hangs until the client leaves).
 */
export async function startHostileServers(
  count: number,
  answer?: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<HostileServers> {
  let arrived = 0;
  let waiters: { n: number; resolve: () => void }[] = [];
  const servers: http.Server[] = [];
  for (let i = 0; i < count; i++) {
    const server = http.createServer((req, res) => {
      arrived++;
      waiters = waiters.filter((w) => {
        if (w.n > arrived) return true;
        w.resolve();
        return false;
      });
      if (answer !== undefined) answer(req, res);
      // else: hang; the socket closes when the client leaves or the server closes
    });
    server.listen(0, '127.0.0.1');
    servers.push(server);
  }
  await Promise.all(servers.map((s) => once(s, 'listening')));
  return {
    origins: servers.map((s) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`),
    get arrived() {
      return arrived;
    },
    waitForArrived(n) {
      if (arrived >= n) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ n, resolve }));
    },
    async close() {
      for (const s of servers) s.closeAllConnections();
      await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
    },
  };
}
