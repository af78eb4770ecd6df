// The deadlines of one call to an endpoint: one AbortSignal for the call (given to fetch, or to a
// local model), aborted with the typed error of whichever comes first: a deadline set with
// after(), the caller's own AbortSignal (its reason), or end(). run(promise) settles no later
// than that, so a peer that sends a byte now and then, or a local model that ignores its signal,
// cannot hold the call past its deadline.

export class CallClock {
  /** @param {AbortSignal | null | undefined} callerSignal */
  constructor(callerSignal) {
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    this.timers = new Set();
    this.aborted = new Promise((_, reject) => {
      this.signal.addEventListener("abort", () => reject(this.signal.reason), { once: true });
    });
    this.aborted.catch(() => {});  // read through run(); never an unhandled rejection
    this.unlink = () => {};
    if (callerSignal) {
      const follow = () => this.controller.abort(callerSignal.reason);
      if (callerSignal.aborted) follow();
      else {
        callerSignal.addEventListener("abort", follow, { once: true });
        this.unlink = () => callerSignal.removeEventListener("abort", follow);
      }
    }
  }

  /** Abort with `makeError()` after `ms`; returns a function that cancels this deadline. */
  after(ms, makeError) {
    const timer = setTimeout(() => this.controller.abort(makeError()), ms);
    this.timers.add(timer);
    return () => { clearTimeout(timer); this.timers.delete(timer); };
  }

  /** `promise`, or the abort reason once the signal is aborted, whichever settles first. */
  run(promise) {
    return Promise.race([promise, this.aborted]);
  }

  /** Stop every deadline, let the caller's signal go, and abort whatever of the call still runs. */
  end() {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.unlink();
    if (!this.signal.aborted) this.controller.abort(new Error("call ended"));
  }
}
