/**
 * What a doc-test's run blocks run against: local partners on 127.0.0.1 and a private
 * redis-server.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A local partner: 200 + JSON after 20 ms, counting its own peak concurrency. */
export async function startPartner(name) {
  const partner = { name, active: 0, peak: 0, arrived: 0, origin: '' };
  const server = http.createServer((req, res) => {
    partner.arrived++;
    partner.active++;
    partner.peak = Math.max(partner.peak, partner.active);
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      partner.active--;
    };
    res.on('close', finish);
    req.resume();
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: true, partner: name, path: req.url?.split('?')[0] }));
    }, 20);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  partner.origin = `http://127.0.0.1:${server.address().port}`;
  partner.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return partner;
}

/** A free port on 127.0.0.1 (the OS's choice, released for redis-server to take). */
async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * A private redis-server for a run block that names `redis://127.0.0.1:6379`: a free port,
 * nothing on disk, SIGKILLed at the end. `undefined` when redis-server is not installed.
 */
export async function startRedis() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'hostgate-doctest-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  const child = spawn('redis-server', [...args, '--dir', dir], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const ready = await new Promise((resolve) => {
    let seen = '';
    child.on('error', () => resolve(false));
    child.on('exit', () => resolve(false));
    child.stdout.setEncoding('utf8').on('data', (chunk) => {
      seen += chunk;
      if (seen.includes('Ready to accept connections')) resolve(true);
    });
  });
  const stop = () => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  if (!ready) {
    stop();
    return undefined;
  }
  return { url: `redis://127.0.0.1:${port}`, stop };
}
