import { once } from 'node:events';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';

/**
 * A partner API on 127.0.0.1:0 that counts its own concurrent requests: the test oracle.
 *
 * Routes (query parameters):
 * - `/ok?delay=ms&size=bytes` — answers 200 after `delay`, with a body of `size` bytes.
 * - `/held` — waits until the test calls `release()` (event-driven, no sleeps), then 200.
 * - `/status?code=503&retryAfter=1` — answers that status.
 * - `/stall` — sends headers and a first chunk, then never finishes (until the client leaves).
 * - `/drip?every=ms&count=n` — a chunk every `every` ms, `count` chunks, then the end.
 * - `/tick?n=500&ms=5&size=1024` — `n` chunks of `size` bytes, one every `ms` ms.
 * - `/reset` — sends headers and a chunk, then destroys the socket.
 * - `/redirect?to=/ok&hops=2` — 302 chains.
 * - `/flaky?id=k&fails=2&code=503&retryAfter=0&delay=ms` — the first `fails` requests naming
 *   `id` answer `code` (with `Retry-After` when given), later ones 200; each after `delay` ms.
 */
export interface Partner {
  url: string;
  origin: string;
  /**
   * Requests in progress now: from arrival until the partner reads the client's close (FIN or
   * RST) or the response closes, whichever is first: what the partner can know of a cancellation.
   */
  readonly active: number;
  /** The most requests the partner ever saw at once (by `active`). */
  readonly peak: number;
  /**
   * Requests whose response has not closed yet: a server's own in-flight count. After the
   * client's FIN or RST is read, the response closes in a later close phase (after a graceful
   * shutdown for a FIN), so this lags `active` (issue 24's repro counted this way).
   */
  readonly open: number;
  /** The most responses open at once (by `open`). */
  readonly peakOpen: number;
  /** Requests that arrived. */
  readonly arrived: number;
  /** Requests the client closed before the partner finished answering. */
  readonly closedEarly: number;
  /** The most TCP connections open at once (a partner whose cap is a connection pool). */
  readonly peakSockets: number;
  /** Resolves once `active` reaches `n` (or immediately). */
  waitForActive(n: number): Promise<void>;
  /** Resolves once `arrived` reaches `n`. */
  waitForArrived(n: number): Promise<void>;
  /** Resolves once `closedEarly` reaches `n`. */
  waitForClosedEarly(n: number): Promise<void>;
  /** Lets `count` (default: all) requests parked on `/held` answer. */
  release(count?: number): void;
  /** Answers every parked `/held` request, and every later one at once. */
  openHeld(): void;
  resetPeak(): void;
  close(): Promise<void>;
}

/** `tls`: serve HTTPS with this key and certificate (`url` is then `https://…`). */
export interface PartnerOptions {
  tls?: { key: string | Buffer; cert: string | Buffer };
}

export async function startPartner(options: PartnerOptions = {}): Promise<Partner> {
  let active = 0;
  let peak = 0;
  let open = 0;
  let peakOpen = 0;
  let arrived = 0;
  let closedEarly = 0;
  const held: (() => void)[] = [];
  const flakyCounts = new Map<string, number>();
  let heldOpen = false;
  let waiters: { check: () => boolean; resolve: () => void }[] = [];
  const notify = () => {
    waiters = waiters.filter((w) => {
      if (!w.check()) return true;
      w.resolve();
      return false;
    });
  };
  const waitFor = (check: () => boolean) =>
    check() ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ check, resolve }));

  const handler: http.RequestListener = (req, res) => {
    active++;
    arrived++;
    if (active > peak) peak = active;
    open++;
    if (open > peakOpen) peakOpen = open;
    let done = false;
    const socket = req.socket;
    const finish = () => {
      if (done) return;
      done = true;
      socket.off('end', finish);
      socket.off('error', finish);
      active--;
      if (!res.writableFinished) closedEarly++;
      notify();
    };
    res.on('close', finish);
    res.once('close', () => open--);
    // The client closing its side (FIN, or RST over unread data) ends the request for the
    // partner: the first thing it can see of a cancellation, before res 'close'.
    socket.once('end', finish);
    socket.once('error', finish);
    notify();
    const url = new URL(req.url ?? '/', 'http://partner');
    const q = url.searchParams;
    req.resume();
    const answer = () => {
      const size = Number(q.get('size') ?? 2);
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': size });
      res.end('x'.repeat(size));
    };
    // Routed by the first path segment: `/held/bucket/key` (an SDK's path-style URL) is `/held`.
    switch (url.pathname.replace(/^(\/[^/]*).*$/, '$1')) {
      case '/ok': {
        const delay = Number(q.get('delay') ?? 0);
        if (delay > 0) setTimeout(answer, delay);
        else answer();
        return;
      }
      case '/held':
        if (heldOpen) answer();
        else held.push(answer);
        return;
      case '/status': {
        const code = Number(q.get('code') ?? 500);
        const headers: http.OutgoingHttpHeaders = { 'content-type': 'text/plain' };
        const retryAfter = q.get('retryAfter');
        if (retryAfter !== null) headers['retry-after'] = retryAfter;
        res.writeHead(code, headers);
        res.end(`status ${code}`);
        return;
      }
      case '/stall':
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first chunk');
        return;
      case '/drip': {
        const every = Number(q.get('every') ?? 50);
        let left = Number(q.get('count') ?? 10);
        res.writeHead(200, { 'content-type': 'text/plain' });
        const drip = setInterval(() => {
          if (--left > 0) res.write('.');
          else res.end('.');
          if (left <= 0) clearInterval(drip);
        }, every);
        res.on('close', () => clearInterval(drip));
        return;
      }
      case '/tick': {
        // A long body that keeps arriving: a cancel mid-stream closes with an RST when bytes are
        // left unread in the client's socket, else a FIN.
        const ms = Number(q.get('ms') ?? 5);
        const size = Number(q.get('size') ?? 1024);
        let left = Number(q.get('n') ?? 100);
        res.writeHead(200, { 'content-type': 'text/plain' });
        const chunk = 'x'.repeat(size);
        const tick = setInterval(() => {
          if (--left > 0) res.write(chunk);
          else res.end(chunk);
          if (left <= 0) clearInterval(tick);
        }, ms);
        res.on('close', () => clearInterval(tick));
        return;
      }
      case '/reset':
        res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 1000 });
        res.write('partial', () => res.socket?.destroy());
        return;
      case '/redirect': {
        const hops = Number(q.get('hops') ?? 1);
        const to = q.get('to') ?? '/ok';
        const location = hops > 1 ? `/redirect?to=${encodeURIComponent(to)}&hops=${hops - 1}` : to;
        res.writeHead(302, { location, 'content-length': 0 });
        res.end();
        return;
      }
      case '/flaky': {
        const id = q.get('id') ?? '';
        const seen = (flakyCounts.get(id) ?? 0) + 1;
        flakyCounts.set(id, seen);
        const fail = () => {
          const headers: http.OutgoingHttpHeaders = { 'content-type': 'text/plain' };
          const retryAfter = q.get('retryAfter');
          if (retryAfter !== null) headers['retry-after'] = retryAfter;
          res.writeHead(Number(q.get('code') ?? 503), headers);
          res.end('try again');
        };
        const reply = seen <= Number(q.get('fails') ?? 1) ? fail : answer;
        const delay = Number(q.get('delay') ?? 0);
        if (delay > 0) setTimeout(reply, delay);
        else reply();
        return;
      }
      default:
        res.writeHead(404);
        res.end();
    }
  };
  const server =
    options.tls === undefined
      ? http.createServer(handler)
      : https.createServer(options.tls, handler);
  let sockets = 0;
  let peakSockets = 0;
  server.on('connection', (socket) => {
    sockets++;
    if (sockets > peakSockets) peakSockets = sockets;
    socket.on('close', () => sockets--);
  });
  server.keepAliveTimeout = 5000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const origin = `${options.tls === undefined ? 'http' : 'https'}://127.0.0.1:${port}`;

  return {
    url: origin,
    origin,
    get active() {
      return active;
    },
    get peak() {
      return peak;
    },
    get open() {
      return open;
    },
    get peakOpen() {
      return peakOpen;
    },
    get arrived() {
      return arrived;
    },
    get closedEarly() {
      return closedEarly;
    },
    get peakSockets() {
      return peakSockets;
    },
    waitForActive: (n) => waitFor(() => active >= n),
    waitForArrived: (n) => waitFor(() => arrived >= n),
    waitForClosedEarly: (n) => waitFor(() => closedEarly >= n),
    release(count = held.length) {
      for (const answer of held.splice(0, count)) answer();
    },
    openHeld() {
      heldOpen = true;
      for (const answer of held.splice(0)) answer();
    },
    resetPeak() {
      peak = active;
      peakOpen = open;
    },
    async close() {
      for (const answer of held.splice(0)) answer();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
