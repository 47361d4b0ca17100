// The admin endpoint's JSON API, as the console calls it. Reads are plain GETs (the browser
// sends the endpoint's Basic credentials it was given for the page). State-changing requests
// carry the broker's admin token in X-Ferromq-Token, read once from /api/token: a page of
// another origin can neither read the token nor set the header without a CORS preflight the
// endpoint never grants.

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

let token = null;

async function decode(response, path) {
  const text = await response.text();
  let value = null;
  if (text) {
    try {
      value = JSON.parse(text);
    } catch {
      value = null;
    }
  }
  if (!response.ok) {
    const message = value && typeof value.error === "string" ? value.error : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, message);
  }
  if (value === null && text) throw new ApiError(response.status, `${path}: the answer is not JSON`);
  return value;
}

/** GET `path`, its JSON. */
export async function get(path) {
  const response = await fetch(path, {
    credentials: "same-origin",
    cache: "no-store",
    headers: { Accept: "application/json" },
  });
  return decode(response, path);
}

async function adminToken(fresh) {
  if (fresh || token === null) {
    const answer = await get("/api/token");
    token = answer.token;
  }
  return token;
}

/** `method path` with `body` as JSON (when given) and the admin token. */
export async function change(method, path, body) {
  const attempt = async (fresh) => {
    const headers = { Accept: "application/json", "X-Ferromq-Token": await adminToken(fresh) };
    const init = { method, credentials: "same-origin", cache: "no-store", headers };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return fetch(path, init);
  };
  let response = await attempt(false);
  // A restarted broker has a new token: read it again once.
  if (response.status === 403) response = await attempt(true);
  return decode(response, path);
}

export const post = (path, body) => change("POST", path, body === undefined ? {} : body);
export const del = (path) => change("DELETE", path);

/** `/api/destinations/{kind}/{name}`, the name percent-encoded. */
export function destinationPath(kind, name) {
  return `/api/destinations/${kind}/${encodeURIComponent(name)}`;
}

/** A query string of the entries of `params` that are set. */
export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
