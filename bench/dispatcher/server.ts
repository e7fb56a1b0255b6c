/** The partner for bench/dispatcher.ts, in its own process so it does not share the client's loop. */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const server = http.createServer((req, res) => {
  const slow = /^\/slow\?ms=(\d+)/.exec(req.url ?? '');
  const answer = () => {
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 });
    res.end('ok');
  };
  if (slow) setTimeout(answer, Number(slow[1]));
  else answer();
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  process.send?.({ port: (server.address() as AddressInfo).port });
});
process.on('disconnect', () => process.exit(0));
