/**
 * The Lua scripts behind a shared gate: every state change is one of these, atomic in Redis,
 * on Redis `TIME` (never a client clock), touching only the gate's keys (one hash slot).
 *
 * Keys of a gate, all under one `{...}` hash tag:
 * - `H` holders: ZSET lease unit -> expiry (ms, Redis time), one member per unit of the cap, so
 *   `ZCARD H` is the units held: a lease of weight w is its id plus `<id>#2` … `<id>#<w>`, all
 *   added, renewed, expired and removed together. A ticket granted by a release gets a short
 *   claim window; its owner's claim (or heartbeat) turns it into a full lease. A grant whose
 *   owner heard its wake-up ends half a ms later (`HEARD` in holders.lua): the mark that
 *   tells it from a lease (every other score is a whole ms), so that a script can take back such
 *   a grant when its owner stopped listening before it claimed (takeBackDeaf, fill.lua).
 * - `Q` tickets: ZSET ticket id -> arrival sequence (FIFO)
 * - `S` arrival sequence counter
 * - `P` processes: ZSET process id -> end of its liveness window (renewed by its heartbeat): a
 *   ticket lives while its owner does, so a heartbeat never renews tickets one by one, and a
 *   dead process's tickets are skipped, never granted. An entry stays a lease past its window,
 *   so `ZCARD P` (the fleet size behind the local share) forgives a late heartbeat.
 * - `M` meta, a hash: `v` the layout version ({@link LAYOUT}), `c` the cap (the first process's,
 *   changed only by SETCAP), `r` the end of a recovery window (ms) or 0, `h` 1 while `H` holds
 *   leases. Missing while a process that used the gate before calls means Redis lost the gate's
 *   state (a restart, a flush, an eviction): for one lease nobody is granted, so every live
 *   holder can register its lease again first. Missing for a process that never used the gate
 *   (a first use, or a loss it cannot tell from one): nobody is granted for `firstUseWaitMs`.
 *   Either way every process of the gate is told at once on `<wake prefix>lost` and registers
 *   its leases again without waiting for its heartbeat. `h` 1 with `H` gone (evicted by an
 *   `allkeys-*` policy) opens the whole lease's window too. A `v` other than ours (another
 *   hostgate version or shared-gate mode on the same prefix) makes every script refuse before
 *   it reads or writes anything else; an `M` with a cap and no `v` is the layout of the release
 *   before versions, the same keys and members as `fifo/1` for weight-1 permits: it is adopted
 *   (its `v` written) rather than refused, so a rolling upgrade from it needs no new prefix.
 *   `lr` is the Redis time (ms) of the last script run on the gate, every script's first write:
 *   a gap longer than a heartbeat and a command timeout, or `lr` ahead of the clock by that much,
 *   is Redis away or its clock stepped, and time is taken as frozen during it
 *   (commands/includes/rebaseGap.lua).
 * Wake-ups: `SPUBLISH` of a granted ticket's id on `<prefix>{<name>}:wake:<owner process id>`, a
 * shard channel in the gate's slot (on a Cluster it stays on the gate's node).
 * A ticket and the lease it becomes share one id, `<process id>:<n>`, `<process id>:<n>/<w>` for
 * a weight w > 1: the owner and the weight are in the id, so no script needs another key for them.
 *
 * Every Redis-time timestamp of a gate (what an emulated clock step must move, all by the same
 * ms; issue 32's campaign does so with one script): the scores of `H` (lease and claim
 * expiries) and of `P` (liveness ends); in `M`: `r` (recovery window end, 0 for none), `t`
 * (GCRA's timestamp, fractional ms), `lr` (last run), and the time after the `@` of `n`
 * (`<ticket>@<ms>`, when the head was told its slot; used to tell it again, and to pass over
 * an owner that has not come `lateMs` after it, kept in `od`; never to grant). `Q`'s scores are arrival sequence numbers, not times. A grant's age (for a rate's
 * late grants) is read from its `H` score less the claim window, so it moves with `H`.
 *
 * `H` and `Q` have no TTL (an empty sorted set is deleted by Redis itself), so a `volatile-*`
 * eviction policy can never drop a lease or a ticket; `S`, `P` and `M` live 30 days past the
 * last heartbeat, and losing `M` to eviction opens a recovery window rather than a gap.
 */
import { type LuaCommand, loadCommand } from './lua.js';
import { LATE_FLOOR_MS } from './shared-rate.js';

export type { Script } from './lua.js';

/** The key layout these scripts read and write, stored in each gate's meta hash as `v`. */
export const LAYOUT = 'fifo/1';
/**
 * The layout of a gate with a request rate: `fifo/1` plus the GCRA state in the meta hash. A
 * process without a rate (or of a release before rates) is refused on it, so no process grants
 * past the rate unknowingly; a process with a rate adopts a `fifo/1` gate (same keys otherwise).
 */
export const RATE_LAYOUT = 'fifo/1+rate';
/**
 * "Redis lost this gate's state": the message, and the suffix of the gate's channel that carries
 * it (`<prefix>{<name>}:wake:lost`); never a ticket id, which holds a `:`.
 */
export const LOST = 'lost';
/** The error reply of a script that found another layout: this prefix, then the layout found. */
export const LAYOUT_REFUSED = 'HOSTGATE_LAYOUT ';

/** The key suffixes, in the order every script declares them. */
export const KEY_SUFFIXES = ['h', 'q', 's', 'p', 'm'] as const;

/**
 * The TypeScript values the scripts are written with, as `{{NAME}}` placeholders (substituted
 * once, at load: the scripts' arguments stay as they are).
 */
const VALUES = { LAYOUT, RATE_LAYOUT, LOST, LAYOUT_REFUSED, LATE_FLOOR_MS } as const;
const COMMANDS = new URL('./commands/', import.meta.url);

/** A command of commands/, checked to take the gate's keys. */
function command(file: string): LuaCommand {
  const loaded = loadCommand(new URL(file, COMMANDS), VALUES);
  if (loaded.numberOfKeys !== KEY_SUFFIXES.length) {
    throw new Error(
      `Lua command ${file}: a FIFO gate's script takes its ${KEY_SUFFIXES.length} keys, its name says ${loaded.numberOfKeys}`,
    );
  }
  return loaded;
}

/** The scripts of a FIFO shared gate, one file each under commands/ (what each does: its header). */
export const scripts = {
  acquire: command('acquire-5.lua'),
  release: command('release-5.lua'),
  heartbeat: command('heartbeat-5.lua'),
  claim: command('claim-5.lua'),
  setCap: command('setCap-5.lua'),
  setRate: command('setRate-5.lua'),
  settle: command('settle-5.lua'),
  bye: command('bye-5.lua'),
} as const;
