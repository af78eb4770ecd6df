// What a request needs of the endpoint that serves it (serving/endpoints/_capabilities.py, serving/features/_language.py):
// images, tools, JSON output, a language; and which endpoints lack it. An endpoint lacking a needed
// capability is ruled out like a forbidden one, under the built-in rule `needs:<capability>`.
//
// A language is the app's declaration (Needs.language, or the metadata key "language" where needs
// are read from a chat request); the Python SDK also detects it (py3langid) when an endpoint declares
// `languages` and the request declares none. This SDK has no detector of its own: Router.load takes a
// `languageDetector` (prompt -> code or null) for that, else such a bundle is refused
// (LanguageDetectorMissing).
import { pyRepr } from "../pyrepr.js";

export const CAPABILITIES = Object.freeze(["images", "tools", "json"]);
export const LANGUAGE = "language";
export const RULE_PREFIX = "needs:";
export const LANGUAGE_METADATA_KEY = "language";
const IMAGE_PARTS = ["image_url", "input_image", "image"];
const TOOL_PARAMS = ["tools", "functions", "tool_choice", "function_call"];
const JSON_FORMATS = ["json_object", "json_schema"];
const CODE_SHAPE = /^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})?$/;

/** The primary subtag, lower case: "pt-BR" -> "pt". */
export const primary = (code) => code.split("-", 1)[0].toLowerCase();

/** A declared language's primary subtag; RangeError naming `where` otherwise. */
export function checkLanguage(code, where) {
  if (typeof code !== "string" || !CODE_SHAPE.test(code)) {
    throw new RangeError(`${where} must be a language code such as 'en' or 'pt-BR', got ${typeof code === "string" ? pyRepr(code) : String(code)}`);
  }
  return primary(code);
}

/** Whether an endpoint declaring `languages` (null: not declared) serves `code`. */
export const serves = (languages, code) => languages === null || languages === undefined || languages.some((l) => primary(l) === primary(code));

/** The language a request's metadata declares, checked; null when it declares none. */
export function declaredLanguage(metadata) {
  if (!metadata || !Object.hasOwn(metadata, LANGUAGE_METADATA_KEY)) return null;
  return checkLanguage(metadata[LANGUAGE_METADATA_KEY], `metadata.${LANGUAGE_METADATA_KEY}`);
}

/** The capabilities one request needs; `new Needs()` needs none. `language`: an ISO 639-1 code
 * (kept as its primary subtag), or null when unknown. */
export class Needs {
  constructor({ images = false, tools = false, json = false, language = null } = {}) {
    for (const [name, value] of Object.entries({ images, tools, json })) {
      if (typeof value !== "boolean") throw new TypeError(`Needs.${name} must be true or false, got ${String(value)}`);
    }
    Object.assign(this, { images, tools, json, language: language === null ? null : checkLanguage(language, "Needs.language") });
    Object.freeze(this);
  }

  /** The needed capabilities' names, in CAPABILITIES order. */
  get names() { return CAPABILITIES.filter((name) => this[name]); }

  /** Whether it needs anything. */
  get any() { return this.images || this.tools || this.json || this.language !== null; }

  /** The needed capabilities an endpoint of these capabilities lacks (a language as language=<code>);
   * [] when it has them all, or when its capabilities are unknown (null). */
  lacking(capabilities) {
    if (capabilities === null || capabilities === undefined) return [];
    const missing = this.names.filter((name) => !capabilities[name]);
    if (this.language === null || serves(capabilities.languages, this.language)) return missing;
    return [...missing, `${LANGUAGE}=${this.language}`];
  }

  withLanguage(language) {
    return new Needs({ images: this.images, tools: this.tools, json: this.json, language });
  }
}

/** `needs` as given: null, or a Needs (an empty one reads as null); TypeError otherwise. */
export function checkNeeds(needs) {
  if (needs === null || needs === undefined) return null;
  if (!(needs instanceof Needs)) throw new TypeError(`needs must be a Needs or null, got ${typeof needs}`);
  return needs.any ? needs : null;
}

const hasImage = (content) => Array.isArray(content) && content.some((part) => part !== null && typeof part === "object" && IMAGE_PARTS.includes(part.type));

/** What a chat-completions request needs: an image part in any message -> images; a tools,
 * functions, tool_choice or function_call parameter (not null) -> tools; a response_format of type
 * json_object or json_schema -> json. Reads the request's shape, never its text. */
export function needsOf(messages, params = {}) {
  const images = messages.some((m) => m !== null && typeof m === "object" && hasImage(m.content));
  const tools = TOOL_PARAMS.some((name) => params[name] !== null && params[name] !== undefined);
  const format = params.response_format;
  const json = format !== null && typeof format === "object" && JSON_FORMATS.includes(format.type);
  return new Needs({ images, tools, json });
}

/** `needs` with the request's language: the one `needs` declares, else its metadata's, else the one
 * `detector(prompt)` gives (null: unknown). */
export function withLanguage(needs, prompt, metadata, detector) {
  if (needs !== null && needs.language !== null) return needs;
  let language = declaredLanguage(metadata);
  if (language === null && detector) {
    const found = detector(prompt);
    language = found === null || found === undefined ? null : checkLanguage(found, "languageDetector's answer");
  }
  if (language === null) return needs;
  return needs === null ? new Needs({ language }) : needs.withLanguage(language);
}

/** name -> the needed capabilities it lacks, for each of `names` that lacks one. */
export function ruledOut(needs, capabilities, names) {
  const out = new Map();
  for (const name of names) {
    const missing = needs.lacking(capabilities.get ? capabilities.get(name) : capabilities[name]);
    if (missing.length) out.set(name, missing);
  }
  return out;
}

/** The built-in rule's name: the first capability (CAPABILITIES order, a language last) lacked. */
export function ruleName(lacking) {
  const lacked = [...lacking.values()].flat();
  const flags = lacked.filter((c) => CAPABILITIES.includes(c)).map((c) => CAPABILITIES.indexOf(c));
  if (flags.length || !lacked.length) return RULE_PREFIX + CAPABILITIES[flags.length ? Math.min(...flags) : 0];
  return RULE_PREFIX + lacked[0];
}

/** e.g. "phone-3b lacks images, tools; cloud-mid lacks images". */
export const lackingText = (lacking) => [...lacking].map(([name, missing]) => `${name} lacks ${missing.join(", ")}`).join("; ");

/** Whether any endpoint's capabilities declare the languages it serves. */
export const declaresLanguages = (capabilities) => [...(capabilities instanceof Map ? capabilities.values() : Object.values(capabilities))]
  .some((caps) => caps !== null && caps !== undefined && caps.languages !== null && caps.languages !== undefined);
