// dom.js: building DOM nodes safely, and formatting values for display.
// Every text from the server goes through text nodes (h's string children,
// textContent): never parsed as HTML, so no message or step can inject markup.

/**
 * h builds an element. attrs: class, text, data-*, aria-*, on* handlers
 * (functions), other attributes and properties; children: nodes, strings
 * (as text nodes), arrays of those, null/false (skipped).
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "title" || k === "for") el.setAttribute(k, String(v));
    else if (k in el) el[k] = v;
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

/** fill replaces el's children (nodes, strings, arrays; null/false skipped). */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

/** short is the first 8 characters of an ID. */
export const short = (id) => (id ? String(id).slice(0, 8) : "");

/** tokens formats a token count: 987, 12.3k, 1.20M. */
export function tokens(n) {
  n = Number(n) || 0;
  if (n < 1000) return String(n);
  if (n < 1e6) return (n / 1000).toFixed(n < 1e4 ? 2 : 1).replace(/\.?0+$/, "") + "k";
  return (n / 1e6).toFixed(2) + "M";
}

/** chars formats a size in characters: 987 ch, 12.3k ch. */
export const chars = (n) => tokens(n) + " ch";

/** ms formats a duration in milliseconds. */
export function ms(n) {
  n = Number(n) || 0;
  return n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(n < 10000 ? 2 : 1)} s`;
}

const zeroTime = (t) => !t || t.startsWith("0001-");

/** clock formats a timestamp as local HH:MM:SS ("" for none). */
export function clock(t) {
  if (zeroTime(t)) return "";
  const d = new Date(t);
  return isNaN(d) ? "" : d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

/** stamp formats a timestamp as local date and time ("—" for none). */
export function stamp(t) {
  if (zeroTime(t)) return "—";
  const d = new Date(t);
  return isNaN(d) ? String(t) : d.toLocaleString([], { hour12: false });
}

/** json pretty-prints a value for a <pre>. */
export function json(v) {
  if (v === null || v === undefined) return "—";
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}

/** stateBadge is a small label for an execution or working state. */
export function stateBadge(state, extra) {
  const s = state || "unknown";
  return h("span", { class: `badge st-${s.replace(/[^a-z_]/g, "")}${extra ? " " + extra : ""}`, text: s });
}

/** stepIcon is a glyph for a step's execution state. */
export function stepIcon(state) {
  return { init: "○", pending: "◔", running: "▶", finished: "✓", failed: "✗" }[state] || "·";
}

/** nearBottom reports whether a scrolled list shows its end. */
export const nearBottom = (el) => el.scrollHeight - el.scrollTop - el.clientHeight < 40;
