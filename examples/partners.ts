/**
 * Simulated partner APIs for the demo: real HTTP servers on 127.0.0.1 that enforce their own
 * concurrency cap the way a real partner does — a request over the cap is refused with 503 —
 * and record what they saw: peak concurrency, requests served, refused, and closed early
 * (the caller went away before the answer was complete).
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface SimulatedPartnerOptions {
  name: string;
  /** The partner's real concurrency cap: one more concurrent request is refused with 503. */
  cap: number;
  /** Response time in ms, drawn uniformly from [min, max]. */
  latencyMs: [number, number];
}

export interface PartnerCounts {
  /** Requests in progress now. */
  active: number;
  /** Most requests in progress at once. */
  peak: number;
  /** Answered 200. */
  served: number;
  /** Refused with 503 because the cap was exceeded (hostgate should make this 0). */
  refused: number;
  /** The caller closed the request before the answer was complete. */
  closedEarly: number;
  /**
   * Requests that arrived one over the cap while an earlier caller's close was still on its way
   * (it was read within {@link CLOSE_IN_TRANSIT_MS}); served, not counted in `peak`.
   */
  closeInTransit: number;
}

/**
 * How long a request read one over the cap waits for a close already sent by the caller. On one
 * machine the client closes its connection before it sends the next request, but the kernel
 * may deliver the two on different connections out of order under load (the demo saw it in ~1
 * of 20 runs on a busy 2-core CI machine). A close that never comes is a real overshoot: the
 * request is then refused and counted.
 */
export const CLOSE_IN_TRANSIT_MS = 20;

export interface SimulatedPartner {
  name: string;
  cap: number;
  url: string;
  counts(): PartnerCounts;
  close(): Promise<void>;
}

export async function startSimulatedPartner(
  options: SimulatedPartnerOptions,
): Promise<SimulatedPartner> {
  const counts: PartnerCounts = {
    active: 0,
    peak: 0,
    served: 0,
    refused: 0,
    closedEarly: 0,
    closeInTransit: 0,
  };
  /** Over-cap arrivals waiting for a close in transit: woken by the next finish. */
  const awaitingClose = new Set<() => void>();
  const [min, max] = options.latencyMs;

  const server = http.createServer((req, res) => {
    req.resume();
    counts.active++;
    let done = false;
    const socket = req.socket;
    const finish = () => {
      if (done) return;
      done = true;
      socket.off('end', finish);
      socket.off('error', finish);
      counts.active--;
      if (!res.writableFinished) {
        counts.closedEarly++;
        for (const wake of awaitingClose) wake();
      }
    };
    res.once('close', finish);
    // The client closing its side (FIN, or RST over unread data) is the first the partner can
    // see of a cancellation: from then on it is not working for that caller. res 'close' comes
    // a phase later, after a request on another socket may already have been read.
    socket.once('end', finish);
    socket.once('error', finish);
    // The cap is checked once the partner has read what had already reached it: a request
    // read in the same batch as an earlier cancellation's close is not counted beside it (the
    // "moment late" every client-side limiter leaves; the README's cancellation section), and
    // one over the cap waits briefly for a close still on its way (CLOSE_IN_TRANSIT_MS).
    setImmediate(() => admit(req, res, () => done));
  });

  const admit = (req: http.IncomingMessage, res: http.ServerResponse, gone: () => boolean) => {
    if (gone()) return;
    const over = counts.active - options.cap;
    if (over > 0) {
      // Only callers' closes can excuse it, as many as the overshoot; an answer that completes
      // meanwhile does not (the partner was over its cap all the same).
      const seenAtArrival = counts.active;
      let closes = 0;
      const onClose = () => {
        if (++closes < over) return;
        awaitingClose.delete(onClose);
        clearTimeout(timer);
        if (gone()) return;
        counts.closeInTransit++;
        serve(req, res);
      };
      const timer = setTimeout(() => {
        awaitingClose.delete(onClose);
        if (gone()) return;
        if (seenAtArrival > counts.peak) counts.peak = seenAtArrival;
        refuse(res);
      }, CLOSE_IN_TRANSIT_MS);
      awaitingClose.add(onClose);
      return;
    }
    if (counts.active > counts.peak) counts.peak = counts.active;
    serve(req, res);
  };

  const refuse = (res: http.ServerResponse) => {
    counts.refused++;
    res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '1' });
    res.end(JSON.stringify({ error: `${options.name}: over the cap of ${options.cap}` }));
  };

  /** Within the cap (or excused by a close in transit): answer after the partner's latency. */
  const serve = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const timer = setTimeout(
      () => {
        const body = JSON.stringify({ partner: options.name, path: req.url, at: Date.now() });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(body, () => counts.served++);
      },
      min + Math.random() * (max - min),
    );
    res.once('close', () => clearTimeout(timer));
  };
  server.keepAliveTimeout = 5000;
  server.maxRequestsPerSocket = 0;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  return {
    name: options.name,
    cap: options.cap,
    url: `http://127.0.0.1:${port}`,
    counts: () => ({ ...counts }),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
