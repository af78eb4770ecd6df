// What the policy layer throws (serving/policy/_errors.py, serving/policy/_rules.py's PolicyFileError):
// the Python SDK's names, messages and fields.

/** A request the policy leaves no way to serve. `rules`: the names of the rules involved. */
export class PolicyError extends Error {
  constructor(message, { rules = [] } = {}) {
    super(message);
    this.name = "PolicyError";
    this.rules = Object.freeze([...rules]);
  }
}

/** route(): the matching rules, what the request needs or the context limits leave no endpoint.
 * Nothing was called. */
export class NoFeasibleEndpoint extends PolicyError {
  constructor(message, options) {
    super(message, options);
    this.name = "NoFeasibleEndpoint";
  }
}

/** execute(): the allowed endpoint did not serve (it failed, timed out, its answer was rejected, or the
 * prompt exceeds its context) and the policy forbids the fallback. `rule` forbade `endpoint`;
 * `edge_error`, `steps` and `decision` as on CloudCallError. The forbidden endpoint was never called. */
export class FallbackForbidden extends PolicyError {
  constructor(message, { rule, endpoint, edge_error = null, steps = [], decision = null, cause } = {}) {
    super(message, { rules: [rule] });
    this.name = "FallbackForbidden";
    if (cause !== undefined) this.cause = cause;
    Object.assign(this, { rule, endpoint, edge_error, steps, decision });
  }
}

/** A policy file (or object) that cannot be used; the message names the file, the rule (its index in
 * `rules` and its name) and the key, as the Python SDK's does. */
export class PolicyFileError extends Error {
  constructor(message) {
    super(message);
    this.name = "PolicyFileError";
  }
}

/** An endpoint declares the languages it serves, so each request's language must be known, and this
 * SDK has no language detector (the Python SDK's is py3langid): the app declares the language, or
 * gives Router.load a `languageDetector`. */
export class LanguageDetectorMissing extends Error {
  constructor(message) {
    super(message);
    this.name = "LanguageDetectorMissing";
  }
}
