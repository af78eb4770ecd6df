// What the router sees of a chat conversation, and what a request must hold before anything is
// sent (serving/chat/_conversation.py and request.py).
//
// The prompt routed is: the latest user message, as it is; then every other turn except the
// system (or developer) messages, newest first, each as "role: text"; then the system messages,
// as "system: text"; joined by blank lines. Text parts of a multi-part content are joined by
// newlines; other parts (images, audio) and tool calls count only through their text. So a
// single-turn conversation without a system message routes exactly as router.route(that message),
// the question asked now always sits first in the feature window, and every character the edge
// model would read counts against its context limit. docs/clients.md says why at length.

import { isObject } from "./responses.js";

const SYSTEM_ROLES = ["system", "developer"];
const MAX_PATH_CHARS = 200;

/** `messages` if it is a non-empty array of {role: string, content: string | parts | null};
 * TypeError saying what is wrong. A text part ({type: "text"}) must hold a string `text`. */
export function checkMessages(messages) {
  if (!Array.isArray(messages) || !messages.length) {
    throw new TypeError("messages must be a non-empty array of {role, content} objects");
  }
  messages.forEach((message, i) => {
    if (!isObject(message)) throw new TypeError(`messages[${i}] must be an object, not ${message === null ? "null" : Array.isArray(message) ? "an array" : typeof message}`);
    if (typeof message.role !== "string" || !message.role) throw new TypeError(`messages[${i}] has no 'role' string`);
    const content = message.content;
    if (content !== null && content !== undefined && typeof content !== "string" && !Array.isArray(content)) {
      throw new TypeError(`messages[${i}].content must be a string, an array of parts or null, not ${typeof content}`);
    }
    if (Array.isArray(content)) {
      content.forEach((part, j) => {
        if (isObject(part) && part.type === "text" && typeof part.text !== "string") {
          throw new TypeError(`messages[${i}].content[${j}] is a text part whose 'text' is not a string`);
        }
      });
    }
  });
  return messages;
}

/** The text of one message: its content string, or its text parts joined by newlines. */
export function messageText(message) {
  const content = message.content;
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.filter((p) => isObject(p) && p.type === "text" && typeof p.text === "string").map((p) => p.text).join("\n");
  return "";
}

/** The text the router routes for a conversation (the module doc's rule). */
export function conversationPrompt(messages) {
  checkMessages(messages);
  let anchor = messages.length - 1;
  messages.forEach((m, i) => { if (m.role === "user") anchor = i; });
  const others = [], system = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    if (i !== anchor && !SYSTEM_ROLES.includes(messages[i].role)) others.push(messages[i]);
  }
  messages.forEach((m, i) => { if (i !== anchor && SYSTEM_ROLES.includes(m.role)) system.push(m); });
  const parts = [messageText(messages[anchor])];
  for (const m of [...others, ...system]) {
    const text = messageText(m);
    if (text) parts.push(`${m.role}: ${text}`);
  }
  return parts.join("\n\n");
}

/** `value` can be sent as JSON as it is: RangeError naming the first NaN or infinite number
 * (JSON.stringify would send null in its place), TypeError for what JSON cannot hold at all
 * (a BigInt, a cycle). */
export function checkJsonValue(value, where) {
  try {
    JSON.stringify(value);
  } catch (error) {
    throw new TypeError(`${where || "the request"} cannot be sent as JSON: ${error.message}`);
  }
  const stack = [[where, value]];
  while (stack.length) {
    const [path, item] = stack.pop();
    if (typeof item === "number" && !Number.isFinite(item)) {
      const shown = path.length <= MAX_PATH_CHARS ? path : `${path.slice(0, MAX_PATH_CHARS)}...`;
      const name = Number.isNaN(item) ? "NaN" : item > 0 ? "Infinity" : "-Infinity";
      throw new RangeError(`${shown || "the value"} is ${name}: JSON has no NaN or Infinity; send a finite number`);
    }
    if (Array.isArray(item)) {
      for (let i = item.length - 1; i >= 0; i--) stack.push([`${path}[${i}]`, item[i]]);
    } else if (item !== null && typeof item === "object" && typeof item.toJSON !== "function") {
      const entries = Object.entries(item);
      for (let i = entries.length - 1; i >= 0; i--) stack.push([path ? `${path}.${entries[i][0]}` : entries[i][0], entries[i][1]]);
    }
  }
}
