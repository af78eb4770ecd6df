// The deadlines of one call to an endpoint: one AbortSignal for the call (given to fetch, or to a
// local model), aborted with the typed error of whichever comes first: a deadline set with
// after(), a signal it follows (the caller's own AbortSignal, the cascade runner's for the call:
// its timeout, cut to the request's deadline), with that signal's reason, or end(). run(promise)
// settles no later than that, so a peer that sends a byte now and then, or a local model that
// ignores its signal, cannot hold the call past its deadline.

export class CallClock {
  /** @param {...(AbortSignal | null | undefined)} signals the signals the call follows */
  constructor(...signals) {
    this.controller = new AbortController();
    this.signal = this.controller.signal;
    this.timers = new Set();
    this.aborted = new Promise((_, reject) => {
      this.signal.addEventListener("abort", () => reject(this.signal.reason), { once: true });
    });
    this.aborted.catch(() => {});  // read through run(); never an unhandled rejection
    const unlinks = [];
    for (const signal of signals) {
      if (!signal) continue;
      const follow = () => this.controller.abort(signal.reason);
      if (signal.aborted) {
        if (!this.signal.aborted) follow();
        continue;
      }
      signal.addEventListener("abort", follow, { once: true });
      unlinks.push(() => signal.removeEventListener("abort", follow));
    }
    this.unlink = () => { for (const unlink of unlinks) unlink(); };
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

  /** Stop every deadline, let the signals it follows go, and abort whatever of the call still runs. */
  end() {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.unlink();
    if (!this.signal.aborted) this.controller.abort(new Error("call ended"));
  }
}
