// Building the page with DOM calls, never by parsing markup: everything shown from the
// broker (names, message bodies, properties) goes into text nodes, so that no message can
// inject markup or script.

/**
 * An element: `el("td", {class: "num"}, "12")`. Attributes are set with setAttribute (an
 * `on...` key of a function adds a listener instead); children are nodes or text (null and
 * false are left out, arrays are flattened).
 */
export function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (value === true) {
      node.setAttribute(key, "");
    } else {
      node.setAttribute(key, String(value));
    }
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(node, child);
    else if (child instanceof Node) node.appendChild(child);
    else node.appendChild(document.createTextNode(String(child)));
  }
}

/** Replaces the children of `node` with `children`. */
export function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
  return node;
}

/** `1536` as `1.5 KiB`. */
export function bytes(count) {
  if (count === undefined || count === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(count);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/** Seconds as `3d 4h`, `5h 12m`, `7m 3s`. */
export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  if (m > 0) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

/** A Unix time in milliseconds as a local date and time; `–` when absent. */
export function time(ms) {
  if (!ms) return "–";
  const date = new Date(Number(ms));
  return Number.isNaN(date.getTime()) ? String(ms) : date.toLocaleString();
}

/** A count with thousands separators. */
export function count(value) {
  return value === undefined || value === null ? "–" : Number(value).toLocaleString("en-US");
}

let toastTimer = null;

/** Shows `message` for a few seconds at the bottom of the page. */
export function toast(message, isError) {
  const box = document.getElementById("toast");
  if (!box) return;
  box.textContent = message;
  box.className = isError ? "error" : "";
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { box.hidden = true; }, isError ? 8000 : 4000);
}
