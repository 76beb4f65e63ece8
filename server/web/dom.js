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
    else if (k.startsWith("on") && typeof v === "function") on(el, k.slice(2), v);
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

/**
 * morph makes el's children what fill would make them, but keeps the
 * elements already there where they match (same tag, same keys: keyOf),
 * changing only their attributes, texts and handlers. An element
 * under the pointer or holding the focus stays in the document: the page
 * re-renders on every event, and a button that leaves the document between
 * mousedown and mouseup, even for an instant, gets no click (the operator's
 * "Pause" on a busy task did nothing).
 */
export function morph(el, ...children) {
  const next = document.createElement(el.tagName);
  append(next, children);
  morphChildren(el, next);
  return el;
}

/**
 * place makes parent's children the given elements, in order, moving only
 * those out of place: for lists whose elements are kept across renders
 * (fill would take each out of the document and back, dropping a click
 * under way and the focus of a reply being typed).
 */
export function place(parent, els) {
  const keep = new Set(els);
  for (const c of [...parent.childNodes]) if (!keep.has(c)) c.remove();
  els.forEach((el, i) => {
    if (parent.childNodes[i] !== el) parent.insertBefore(el, parent.childNodes[i] || null);
  });
  return parent;
}

// morphChildren walks the wanted children in order: a kept one is found
// at its place or further on (those passed over are gone: removed, never
// moved, since moving takes an element out of the document too), a new one
// is inserted before the old ones still to match.
function morphChildren(old, next) {
  const want = [...next.childNodes];
  want.forEach((n, i) => {
    const o = old.childNodes[i];
    let match = null;
    for (let c = o; c && !match; c = c.nextSibling) if (alike(c, n)) match = c;
    if (!match) {
      old.insertBefore(n, o || null);
      return;
    }
    while (old.childNodes[i] !== match) old.childNodes[i].remove();
    morphNode(match, n);
  });
  while (old.childNodes.length > want.length) old.lastChild.remove();
}

// Form fields are never morphed: what the user typed is theirs.
const FIELDS = new Set(["INPUT", "TEXTAREA", "SELECT"]);

function alike(o, n) {
  if (o.nodeType !== n.nodeType) return false;
  if (o.nodeType !== Node.ELEMENT_NODE) return true;
  return o.tagName === n.tagName && !FIELDS.has(o.tagName) && keyOf(o) === keyOf(n);
}

// keyOf is what an element must keep to be the same one: its id, its
// data-*-id keys and its first class, its role (the classes after it tell
// its state: "step st-running", "dot ws-paused"). Without the role a new
// pill would be morphed out of the controls next to it, whose button the
// pointer holds.
function keyOf(el) {
  let k = `${el.id}|${el.classList[0] || ""}`;
  for (const a of el.attributes) if (a.name.startsWith("data-") && a.name.endsWith("-id")) k += `|${a.name}=${a.value}`;
  return k;
}

function morphNode(o, n) {
  if (o.nodeType !== Node.ELEMENT_NODE) {
    if (o.nodeValue !== n.nodeValue) o.nodeValue = n.nodeValue;
    return;
  }
  for (const a of [...o.attributes]) if (!n.hasAttribute(a.name)) o.removeAttribute(a.name);
  for (const a of n.attributes) if (o.getAttribute(a.name) !== a.value) o.setAttribute(a.name, a.value);
  for (const type of Object.keys(o.__on || {})) if (!n.__on || !n.__on[type]) o.__on[type] = null;
  for (const [type, f] of Object.entries(n.__on || {})) on(o, type, f);
  morphChildren(o, n);
}

// on sets el's handler of an event type: one listener per type calls the
// handler of the latest render (morph swaps it).
function on(el, type, f) {
  if (!el.__on) el.__on = {};
  if (!(type in el.__on)) el.addEventListener(type, (ev) => el.__on[type] && el.__on[type](ev));
  el.__on[type] = f;
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
