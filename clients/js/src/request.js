// The request record (serving/routing/_request.py): what the app asks of the router, built once where
// it calls the SDK and read by every layer (the chooser, the policy, execute(), the chat client).
//
//   const request = new Request("Summarise this contract: ...", { precision: "exact", metadata: { tier: "free" },
//     deadline: performance.now() + 5000 });
//   const decision = await router.route(request);
//   const execution = await router.execute(request, { edge: onDevice, cloud: frontier });
//
// route(), routeBatch(), execute() and RoutedChat.create() also take a plain prompt (or messages)
// and options, and build the record themselves.
import { checkMessages, conversationPrompt } from "./chat/conversation.js";
import { checkConversationId } from "./conversations.js";
import { Capabilities } from "./endpoints.js";
import { checkNeeds } from "./policy/capabilities.js";
import { checkMetadata } from "./policy/rules.js";
import { checkPrecision, checkPrompt } from "./validation.js";

/** The request's fields besides the text, in the order they are checked. */
export const REQUEST_FIELDS = Object.freeze(["precision", "metadata", "needs", "capabilities", "deadline", "conversation", "messages"]);

/** `capabilities` as a request holds it: null, or a Map of endpoint name -> Capabilities or null
 * (unknown), from an object or Map of Capabilities, plain {images, tools, json, languages} objects or null. */
export function checkCapabilities(capabilities) {
  if (capabilities === null || capabilities === undefined) return null;
  if (typeof capabilities !== "object") throw new TypeError(`capabilities must map endpoint names to Capabilities, got ${typeof capabilities}`);
  const entries = capabilities instanceof Map ? [...capabilities] : Object.entries(capabilities);
  return new Map(entries.map(([name, caps]) => {
    if (caps === null || caps === undefined || caps instanceof Capabilities) return [name, caps ?? null];
    if (typeof caps !== "object") throw new TypeError(`capabilities.${name} must be a Capabilities, an object of flags or null`);
    return [name, new Capabilities(caps)];
  }));
}

function checkDeadline(deadline) {
  if (deadline === null || deadline === undefined) return null;
  if (typeof deadline !== "number" || Number.isNaN(deadline)) {
    throw new TypeError(`deadline must be a performance.now() value (milliseconds) or null, got ${typeof deadline === "number" ? deadline : typeof deadline}`);
  }
  return deadline;
}

function checkConversation(conversation) {
  if (conversation === null || conversation === undefined) return null;
  return checkConversationId(conversation);  // 1 to 256 printable characters, as Python's
}

/**
 * One request, checked when built (TypeError or RangeError naming the field), frozen.
 *
 * text: what is routed: the prompt, or a conversation's text (omit it, or pass null, with `messages`:
 *   the chat client's conversationPrompt of them)
 * precision: "exact", "standard", "tolerant", or null (undeclared)
 * metadata: string -> string the policy's rules read (feature, user tier, declared privacy, ...)
 * needs: what the request needs of its endpoint (a Needs: images, tools, json, a language); an
 *   endpoint lacking it is never chosen nor called
 * capabilities: endpoint name -> its Capabilities, overriding the bundle's own (null: the bundle's)
 * deadline: a performance.now() value (milliseconds) by which the answer must be complete: execute()
 *   cuts each call's timeout to what is left, and calls nothing once it has passed (null: none)
 * conversation: the conversation the request belongs to (an app's id: 1 to 256 printable characters),
 *   or null; its state between turns decides with it (conversations.js)
 * messages: the chat messages `text` was built from, as the app sent them, or null
 */
export class Request {
  constructor(text, { precision = null, metadata = null, needs = null, capabilities = null, deadline = null, conversation = null,
    messages = null } = {}) {
    if (messages !== null && messages !== undefined) checkMessages(messages);
    if ((text === null || text === undefined) && messages !== null && messages !== undefined) text = conversationPrompt(messages);
    this.text = checkPrompt(text, "text");
    this.precision = checkPrecision(precision);
    const given = checkMetadata(metadata);
    this.metadata = given === null ? null : Object.freeze({ ...given });
    this.needs = checkNeeds(needs);
    this.capabilities = checkCapabilities(capabilities);
    this.deadline = checkDeadline(deadline);
    this.conversation = checkConversation(conversation);
    this.messages = messages ?? null;
    Object.freeze(this);
  }

  /** A copy with `changes` (its fields checked again). */
  but(changes) {
    return new Request(changes.text ?? this.text, { ...this.fields(), ...changes });
  }

  /** The fields besides the text, as the constructor takes them. */
  fields() {
    return Object.fromEntries(REQUEST_FIELDS.map((name) => [name, this[name]]));
  }
}

/** `prompt` when it is a Request (TypeError when `fields` give any value too: they belong in it),
 * else a Request of the text with `fields`. `name`: what errors call the argument. */
export function asRequest(prompt, fields = {}, name = "prompt") {
  if (prompt instanceof Request) {
    const given = Object.keys(fields).filter((key) => fields[key] !== null && fields[key] !== undefined);
    if (given.length) throw new TypeError(`give ${given.join(", ")} in the Request, not beside it`);
    return prompt;
  }
  if (typeof prompt !== "string") {
    throw new TypeError(`${name} must be a string or a Request, got ${prompt === null ? "null" : typeof prompt}`);
  }
  return new Request(prompt, fields);
}
