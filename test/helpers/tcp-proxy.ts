import { once } from 'node:events';
import net from 'node:net';

/**
 * A loopback TCP proxy whose target can be switched: what a Sentinel-aware client, a DNS name
 * or a cloud endpoint does on a Redis failover, for clients that know one address only.
 */
export interface TcpProxy {
  readonly port: number;
  /** Sends new connections to `port`, and cuts the open ones so clients reconnect there. */
  switchTo(port: number): void;
  close(): Promise<void>;
}

export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  let target = targetPort;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: '127.0.0.1', port: target });
    open.add(client);
    open.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    switchTo(next) {
      target = next;
      for (const socket of open) socket.destroy();
      open.clear();
    },
    async close() {
      for (const socket of open) socket.destroy();
      open.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
