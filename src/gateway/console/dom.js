// What every page of the console uses: elements made from text, links, and the gateway's API
// called with the tab's token.

export const TOKEN = 'agentfleet.token';
/** An element with `text` as its text (never as HTML) and a class. */
export function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

/** A link to a page of the console. */
export function link(text, hash, cls) {
  const a = el('a', text, cls);
  a.href = hash;
  return a;
}

/** A call of the gateway with the tab's token: the JSON, or an Error saying why. */
export async function api(path, body) {
  const headers = { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN) };
  const init = { headers };
  if (body !== undefined) {
    init.method = 'POST';
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const r = await fetch(path, init);
  const answer = await r.json().catch(() => null);
  if (!r.ok) {
    const e = new Error(answer && answer.error ? answer.error.message : 'HTTP ' + r.status);
    e.status = r.status;
    throw e;
  }
  return answer;
}

export function when(ms) {
  return new Date(ms).toLocaleString();
}

/** A `<time>` of `ms` as a person reads it beside a message: the time of day, with the date
 * when it is not today; the full date and time on hover and in `datetime`. */
export function stamp(ms) {
  const d = new Date(ms);
  const today = new Date().toDateString() === d.toDateString();
  const clock = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  const t = el('time', today ? clock : d.toLocaleDateString() + ' ' + clock, 'when');
  t.dateTime = d.toISOString();
  t.title = when(ms);
  return t;
}

export const seg = (s) => encodeURIComponent(s);

