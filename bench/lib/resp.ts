import net from 'node:net';

/**
 * A minimal RESP2 connection for tests and benchmarks that must talk to a Redis server without
 * going through either client under test (PING, INFO, REPLICAOF, SCAN, MONITOR). One reply per
 * command, in order; no pipelining guarantees beyond that, no reconnect.
 */
export type RespValue = string | number | null | RespValue[] | Error;

export interface RespConnection {
  /** Sends one command and resolves with its reply (a Redis error reply rejects). */
  command(...args: (string | number)[]): Promise<RespValue>;
  /** Every reply that no command is waiting for (MONITOR lines), as it arrives. */
  onPush(listener: (value: RespValue) => void): void;
  close(): void;
}

export function encodeCommand(args: readonly (string | number)[]): string {
  let out = `*${args.length}\r\n`;
  for (const arg of args) {
    const text = String(arg);
    out += `$${Buffer.byteLength(text)}\r\n${text}\r\n`;
  }
  return out;
}

/** Parses one value at `offset`; returns undefined while the buffer holds only part of it. */
function parse(buf: Buffer, offset: number): { value: RespValue; next: number } | undefined {
  const eol = buf.indexOf('\r\n', offset);
  if (eol < 0) return undefined;
  const type = String.fromCharCode(buf[offset] as number);
  const line = buf.toString('utf8', offset + 1, eol);
  const after = eol + 2;
  switch (type) {
    case '+':
      return { value: line, next: after };
    case '-':
      return { value: new Error(line), next: after };
    case ':':
      return { value: Number(line), next: after };
    case '$': {
      const length = Number(line);
      if (length < 0) return { value: null, next: after };
      if (buf.length < after + length + 2) return undefined;
      return { value: buf.toString('utf8', after, after + length), next: after + length + 2 };
    }
    case '*': {
      const count = Number(line);
      if (count < 0) return { value: null, next: after };
      const items: RespValue[] = [];
      let next = after;
      for (let i = 0; i < count; i++) {
        const item = parse(buf, next);
        if (item === undefined) return undefined;
        items.push(item.value);
        next = item.next;
      }
      return { value: items, next };
    }
    default:
      throw new Error(`unexpected RESP type byte ${JSON.stringify(type)}`);
  }
}

/** Connects to 127.0.0.1:`port`; rejects if the server does not accept within `timeoutMs`. */
export function connectResp(port: number, timeoutMs = 2000): Promise<RespConnection> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const pending: { resolve: (v: RespValue) => void; reject: (e: Error) => void }[] = [];
    const pushListeners: ((value: RespValue) => void)[] = [];
    let buffer = Buffer.alloc(0);
    const fail = (error: Error) => {
      for (const p of pending.splice(0)) p.reject(error);
    };
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`no answer from :${port}`)));
    socket.on('error', (error) => {
      fail(error);
      reject(error);
    });
    socket.on('close', () => fail(new Error(`connection to :${port} closed`)));
    socket.on('data', (chunk) => {
      buffer = buffer.length === 0 ? chunk : Buffer.concat([buffer, chunk]);
      let offset = 0;
      for (;;) {
        const parsed = parse(buffer, offset);
        if (parsed === undefined) break;
        offset = parsed.next;
        const waiter = pending.shift();
        if (waiter === undefined) for (const listener of pushListeners) listener(parsed.value);
        else if (parsed.value instanceof Error) waiter.reject(parsed.value);
        else waiter.resolve(parsed.value);
      }
      buffer = buffer.subarray(offset);
    });
    socket.once('connect', () => {
      socket.setTimeout(0);
      resolve({
        command: (...args) =>
          new Promise((res, rej) => {
            pending.push({ resolve: res, reject: rej });
            socket.write(encodeCommand(args));
          }),
        onPush: (listener) => pushListeners.push(listener),
        close: () => socket.destroy(),
      });
    });
  });
}

/** One command on a fresh connection (then closed). */
export async function respCommand(port: number, ...args: (string | number)[]): Promise<RespValue> {
  const conn = await connectResp(port);
  try {
    return await conn.command(...args);
  } finally {
    conn.close();
  }
}
