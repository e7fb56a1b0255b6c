/**
 * The one Lua script of a leased shared gate (`mode: 'leased'`): a process's refresh, in
 * commands/leasedRefresh-4.lua (loaded by lua.ts). Doorman's idea for concurrency permits: each
 * process holds a *block* of the cap sized by its demand and grants from it locally; Redis only
 * apportions the cap, on Redis `TIME`, once per refresh.
 *
 * Keys of a leased gate, all under one `{...}` hash tag:
 * - `M` meta, a hash (the FIFO mode's meta key): `v` the layout (`'leased/1'`), `c` the cap,
 *   `r` the end of a recovery window (ms, Redis time), `x` when its 30-day TTL was last set,
 *   `lr` the Redis time of the last run (issue 32: a gap or a step is told by it), `lx` when `L`'s
 *   TTL runs out as a refresh last set it, and what the last walk of `L` found (`t` when, `b` `e`
 *   `n` `k` `u` `f`: see commands/leasedRefresh-4.lua; `rt` `rb` `re` `rf` a rate's), `o` Σ owed, `ot` the oldest `owed` tell not yet checked for owners that never came and
 *   `ns` those owners (ids a space apart, until each refreshes: leasedWalk.lua), and while a large fleet's walk goes on a slice per
 *   refresh, its state `wc` `wa` `wh` `wr` `wf` `wg` `wl` `wq` `wo` (includes/leasedPass.lua), `g` when a caller under its fair share last said so on the
 *   gate's signal channel (`<prefix>{<name>}:wake:give`, issue 35), and `pk` the rate shares
 *   clean closes parked for a window (`<until ms>:<share>:<slot ms>` items: a replacement asking
 *   for its first share takes one; the level keeps their places meanwhile;
 *   includes/leasedClose.lua), `cs` the latest next slot of a rate share given back (a share
 *   taken from none sends no sooner: includes/leasedShare.lua), `ri` the run_id of the Redis
 *   server that last wrote the state (another one is a restart or a failover: a learning window),
 *   `ll` and `lq` until when a process whose fallback grants past its count (the cap's, the
 *   rate's) may be live, and `rq` the end of a learning window of the rate alone
 *   (commands/includes/leasedGap.lua).
 * - `L` blocks, a hash: process id -> `"<expiry ms> <block> <held> <wants> <share> <counted>
 *   <counted until ms> <rate wants> <need> <since ms> <head> <owed> <rate need> <rc>"`, and
 *   ` <lead>` only while a rate hold counts a lead, or ` <lead> <seq>` (the lead 0 if none) from
 *   a process that numbers its refreshes: the number of the refresh that wrote it, by which a
 *   process sees writes Redis lost (commands/leasedRefresh-4.lua, Lost writes;
 *   commands/includes/leasedEntry.lua; entries of an older writer end sooner), `<id>~<k>` a
 *   closed process's sends of its last window by age (rate only), and `_s` the sum of
 *   max(block, held) over its entries, `_r` Σ rc (each entry's counted rate share). A TTL of three
 *   leases, renewed by a refresh that finds under one and a half left by `M.lx` (or registers, or
 *   finds `_s` missing), so it outlives every live entry and a gate nobody uses leaves no key
 *   (under a `volatile-*` policy it is evictable as under `allkeys-*`, and the store warns of both
 *   at start); an expired entry is deleted by the next walk (commands/includes/leasedWalk.lua), a
 *   cleanly closed one at once.
 * - `H`, `Q`: the FIFO mode's holders and tickets, only read (when a process registers): a
 *   leased process refuses a gate that FIFO processes use (and they refuse `v = 'leased/1'`).
 *
 * **Redis-time timestamps** (what a step of Redis's clock moves, and what a test emulating a
 * step must move by the step; the script moves all of them by the gap when it detects one):
 * `M.r`, `M.t`, `M.lr`, `M.ot`, `M.rq`, `M.x` (only renewal bookkeeping: the script leaves it),
 * `M.ll` and `M.lq` (the script leaves them too: each is compared only with `M.lr`, both as they
 * were before the gap, and rewritten a lease ahead by the next refresh of its kind), the sinces in
 * `M.f` and `M.rf` (the ends in `M.pk` are not moved: a place ending over a window ahead is
 * taken as lapsed, one lapsing early only lets the survivors grow), and in every entry of `L`
 * (closed tails `<id>~<k>` included) field 1, its expiry, field 7, its rate hold's end, and
 * field 10, its head's since (0: none). Not `M.lx`: it is on the clock of Redis's own key
 * expiry, which a real step moves alike and an emulated one (the keys' TTLs left as they are)
 * does not.
 *
 * The invariant, over live entries: Σ max(block, held) ≤ cap. A held permit cannot be taken
 * back, so a block that shrinks below what its process holds grants nothing new until enough
 * of those permits are released.
 */
import { type LuaCommand, loadCommand } from './lua.js';

/** The layout a leased gate writes in `M.v`; any other found there is refused. */
export const LEASED_LAYOUT = 'leased/1';
/**
 * The layout of a leased gate with a request rate: `leased/1` plus the rate in `M.rt` and each
 * entry's rate part. A process without a rate (or of a release before leased rates) is refused
 * on it, so no process sends past the rate unknowingly; a process with a rate adopts a
 * `leased/1` gate (same keys otherwise). As `fifo/1+rate` for the FIFO mode.
 */
export const LEASED_RATE_LAYOUT = 'leased/1+rate';

/** Key suffixes of a leased gate, in the order the script declares them (`m`, `h`, `q` are the FIFO mode's). */
export const LEASED_KEY_SUFFIXES = ['m', 'l', 'h', 'q'] as const;

/** The TypeScript values the script is written with, as `{{NAME}}` placeholders (see lua.ts). */
const VALUES = { LEASED_LAYOUT, LEASED_RATE_LAYOUT } as const;

/** A command of commands/, checked to take a leased gate's keys. */
function command(file: string): LuaCommand {
  const loaded = loadCommand(new URL(`./commands/${file}`, import.meta.url), VALUES);
  if (loaded.numberOfKeys !== LEASED_KEY_SUFFIXES.length) {
    throw new Error(
      `Lua command ${file}: a leased gate's script takes its ${LEASED_KEY_SUFFIXES.length} keys, its name says ${loaded.numberOfKeys}`,
    );
  }
  return loaded;
}

/**
 * The script of a leased shared gate: REFRESH, in commands/leasedRefresh-4.lua (what it does,
 * its arguments and its reply: the file's header; its parts: commands/includes/leased*.lua).
 */
export const leasedScripts = { refresh: command('leasedRefresh-4.lua') } as const;
