// Budgets for policy rules (serving/policy/_budgets.py): what each budget holder (a value of a
// metadata key, such as a user id) has spent in the current UTC hour, day or month, in this process.
// The same ledger as Python's: bounded (MAX_HOLDERS entries; a holder value over 64 characters kept
// as its SHA-256 digest, from WebCrypto), spent entries kept until their window ends, the least
// recently charged unspent entry dropped to make room, and a shared account per key and period once
// the ledger is full of spent entries. Digests are asynchronous in browsers, so `add` and `holderIds`
// are async; reading a spend by holder id is not (the policy reads it while deciding).
import { codePointLength } from "../pytext.js";

export const PERIODS = Object.freeze(["hour", "day", "month"]);
export const MAX_HOLDERS = 100_000;
export const MAX_VALUE_CHARS = 64;

/** The UTC window `now` (seconds since the epoch) falls in, as a number that changes with the window. */
export function window(period, now) {
  if (period === "hour") return Math.floor(now / 3600);
  if (period === "day") return Math.floor(now / 86400);
  if (period === "month") {
    const date = new Date(now * 1000);
    return date.getUTCFullYear() * 12 + date.getUTCMonth() + 1;
  }
  throw new RangeError(`period '${period}': use one of ${PERIODS.join(", ")}`);
}

/** RangeError unless `amount` is a finite number >= 0 (a spend). */
export function checkAmount(amount) {
  if (typeof amount !== "number" || !Number.isFinite(amount) || amount < 0) {
    throw new RangeError(`a spend must be a finite number >= 0, got ${String(amount)}`);
  }
}

const hex = (buffer) => Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, "0")).join("");
const encoder = new TextEncoder();

/** How the ledger keeps a holder value: as it is up to MAX_VALUE_CHARS characters, else "sha256:"
 * and its digest's hex (longer than any value kept as it is, so never equal to one). A lone surrogate
 * is digested as Python's "surrogatepass" UTF-8 would give it only approximately (WebCrypto takes
 * well-formed text); such a holder is still one holder. */
export async function holderId(value) {
  if (codePointLength(value) <= MAX_VALUE_CHARS) return value;
  return `sha256:${hex(await globalThis.crypto.subtle.digest("SHA-256", encoder.encode(value)))}`;
}

/** key -> holder id, for the `keys` the metadata names. */
export async function holderIds(metadata, keys) {
  const out = new Map();
  if (!metadata) return out;
  for (const key of keys) if (Object.hasOwn(metadata, key)) out.set(key, await holderId(metadata[key]));
  return out;
}

/** (key, period) -> the tightest limit of the policy's budget rules ("key\0period" keys). */
export function limitsOf(policy) {
  const made = new Map();
  for (const rule of policy?.rules ?? []) {
    if (rule.budget === null) continue;
    const [key, limit, period] = rule.budget;
    const at = `${key}\u0000${period}`;
    made.set(at, Math.min(limit, made.get(at) ?? Infinity));
  }
  return made;
}

const entryOf = (key, holder, period) => JSON.stringify([key, holder, period]);
const seconds = () => Date.now() / 1000;

export class Spending {
  constructor(maxHolders = MAX_HOLDERS) {
    if (!Number.isInteger(maxHolders) || maxHolders < 1) throw new RangeError(`maxHolders=${maxHolders}: must be a positive integer`);
    this.maxHolders = maxHolders;
    this.open = new Map();  // entries below their limits, least recently charged first: [window, total]
    this.spentEntries = Object.fromEntries(PERIODS.map((p) => [p, new Map()]));  // per period, in charge order
    this.shared = new Map();  // "key\0period" -> [window, total] of holders charged while full of spent ones
    this.size = 0;
  }

  /** Count `amount` against every holder the metadata names under `keys`, in every period. `limits`:
   * limitsOf(policy), which tells a spent holder, kept until its window ends. */
  async add(metadata, amount, keys, now = null, { limits = null } = {}) {
    checkAmount(amount);
    const at = now ?? seconds();
    const holders = await holderIds(metadata, keys);
    for (const [key, holder] of holders) {
      for (const period of PERIODS) {
        const limit = limits ? limits.get(`${key}\u0000${period}`) ?? null : null;
        this.charge(key, holder, period, amount, window(period, at), limit, at);
      }
    }
  }

  /** What the holder of id `holder` (holderId) under `key` has spent in the current `period` window. */
  spentById(key, holder, period, now = null) {
    const current = window(period, now ?? seconds());
    const entry = entryOf(key, holder, period);
    const record = this.open.get(entry) ?? this.spentEntries[period].get(entry) ?? this.shared.get(`${key}\u0000${period}`);
    if (record === undefined) return 0;
    return record[0] === current ? record[1] : 0;
  }

  /** What `value` of metadata key `key` has spent in the current `period` window. */
  async spent(key, value, period, now = null) {
    return this.spentById(key, await holderId(value), period, now);
  }

  charge(key, holder, period, amount, current, limit, now) {
    const entry = entryOf(key, holder, period);
    let record = this.open.get(entry);
    if (record !== undefined) this.open.delete(entry);
    else {
      record = this.spentEntries[period].get(entry);
      if (record !== undefined) this.spentEntries[period].delete(entry);
    }
    let total;
    if (record !== undefined) total = (record[0] === current ? record[1] : 0) + amount;
    else {  // a holder the ledger does not hold
      const sharedKey = `${key}\u0000${period}`;
      const shared = this.shared.get(sharedKey);
      if (shared !== undefined && shared[0] === current) {
        this.shared.set(sharedKey, [current, shared[1] + amount]);
        return;
      }
      if (amount === 0) return;
      if (this.size >= this.maxHolders && !this.makeRoom(now)) {
        this.shared.set(sharedKey, [current, amount]);
        return;
      }
      this.size++;
      total = amount;
    }
    if (limit !== null && limit > 0 && total >= limit) this.spentEntries[period].set(entry, [current, total]);
    else this.open.set(entry, [current, total]);
  }

  makeRoom(now) {
    for (const period of PERIODS) {
      const spent = this.spentEntries[period];
      const first = spent.entries().next();
      if (!first.done && first.value[1][0] !== window(period, now)) {
        spent.delete(first.value[0]);
        this.size--;
        return true;
      }
    }
    const first = this.open.keys().next();
    if (!first.done) {
      this.open.delete(first.value);
      this.size--;
      return true;
    }
    return false;
  }

  get length() { return this.size; }
}
