// Argument checks shared by every router's public methods (serving/routing/_validation.py): argument
// errors are the caller's and throw; everything else about a prompt is routable.
import { PRECISIONS } from "./contract.js";

/** The prompt, or a TypeError naming the argument. */
export function checkPrompt(prompt, name = "prompt") {
  if (typeof prompt !== "string") throw new TypeError(`${name} must be a string, got ${prompt === null ? "null" : typeof prompt}`);
  return prompt;
}

/** The precision tag or null (undefined is undeclared too); a RangeError listing the allowed ones. */
export function checkPrecision(precision, name = "precision") {
  if (precision === null || precision === undefined) return null;
  if (typeof precision !== "string" || !PRECISIONS.includes(precision)) {
    throw new RangeError(`${name}=${JSON.stringify(precision)} is not allowed; use one of ${PRECISIONS.join(", ")} or null`);
  }
  return precision;
}

/** [prompts, precisions] checked; precisions null means every prompt undeclared. `isRequest`: the
 * prompts may also be request records (request.js), which it tells apart. */
export function checkBatch(prompts, precisions, isRequest = null) {
  if (typeof prompts === "string" || prompts === null || typeof prompts?.[Symbol.iterator] !== "function") {
    throw new TypeError(`prompts must be an array of strings, got ${prompts === null ? "null" : typeof prompts}`);
  }
  const checked = [...prompts].map((p, i) => {
    if (isRequest === null || typeof p === "string" || isRequest(p)) return isRequest === null ? checkPrompt(p, `prompts[${i}]`) : p;
    throw new TypeError(`prompts[${i}] must be a string or a Request, got ${p === null ? "null" : typeof p}`);
  });
  if (precisions === null || precisions === undefined) return [checked, checked.map(() => null)];
  const tags = [...precisions];
  if (tags.length !== checked.length) throw new RangeError(`precisions has ${tags.length} items for ${checked.length} prompts`);
  return [checked, tags.map((p, i) => checkPrecision(p, `precisions[${i}]`))];
}
