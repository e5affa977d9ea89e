// The agentfleet console: plain DOM, no library, no HTML strings. Every text from the gateway
// (agents, people, tools, models) goes into the page with textContent only; the page's
// Content-Security-Policy (Trusted Types) makes any HTML sink throw.
'use strict';

const TOKEN = 'agentfleet.token';
const $ = (id) => document.getElementById(id);

/** An element with `text` as its text (never as HTML) and a class. */
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

/** GET `path` of the gateway with the tab's token: the JSON, or an Error saying why. */
async function api(path) {
  const token = sessionStorage.getItem(TOKEN);
  const r = await fetch(path, { headers: { Authorization: 'Bearer ' + token } });
  const body = await r.json().catch(() => null);
  if (!r.ok) {
    const why = body && body.error ? body.error.message : 'HTTP ' + r.status;
    const e = new Error(why);
    e.status = r.status;
    throw e;
  }
  return body;
}

function when(ms) {
  return new Date(ms).toLocaleString();
}

function showSpaces(list) {
  const ul = $('spaces');
  ul.replaceChildren();
  if (list.spaces.length === 0) ul.append(el('li', 'You are in no space.', 'empty'));
  for (const s of list.spaces) {
    const li = el('li');
    li.dataset.space = s.namespace + '/' + s.name;
    li.addEventListener('click', () => openSpace(s.namespace, s.name, s.displayName));
    li.append(el('div', s.displayName, 'name text'));
    const members = s.members.map((m) => m.name).join(', ');
    li.append(el('div', s.namespace + '/' + s.name + ' · ' + members, 'meta text'));
    ul.append(li);
  }
}

function showCalls(list) {
  const ul = $('calls');
  ul.replaceChildren();
  if (list.calls.length === 0) ul.append(el('li', 'Nothing waits for you.', 'empty'));
  for (const c of list.calls) {
    const li = el('li');
    li.dataset.call = c.callId;
    li.append(el('div', c.agent + ' asks: ' + c.tool + ' (' + c.kind + ')', 'name text'));
    li.append(el('div', JSON.stringify(c.arguments), 'text'));
    li.append(el('div', 'in ' + c.namespace + '/' + c.space + ' since ' + when(c.sinceMs) +
      ', until ' + when(c.expiresMs), 'meta text'));
    ul.append(li);
  }
}

// ---- A space: its messages, live (SSE over fetch, since EventSource cannot send the token),
// resumed after a dropped connection from the last message id, and sending.

let open = null; // {ns, name, abort, last}

function path(ns, name) {
  return '/v1/spaces/' + encodeURIComponent(ns) + '/' + encodeURIComponent(name);
}

function messageItem(m) {
  const li = el('li', undefined, m.sender.kind === 'agent' ? 'message agent' : 'message');
  li.dataset.id = m.id;
  li.dir = 'auto';
  li.append(el('span', m.sender.name, 'sender text'));
  li.append(el('span', m.text, 'text'));
  return li;
}

function addMessage(m) {
  const list = $('messages');
  if (list.querySelector('li[data-id="' + CSS.escape(m.id) + '"]')) return;
  // The agent's streamed draft gives way to the message it became.
  for (const d of list.querySelectorAll('li.streaming')) {
    if (d.dataset.sender === m.sender.id) d.remove();
  }
  list.append(messageItem(m));
  list.scrollTop = list.scrollHeight;
  if (open) open.last = m.id;
}

function addDelta(d) {
  const list = $('messages');
  let li = list.querySelector('li.streaming[data-stream="' + CSS.escape(d.streamId) + '"]');
  if (!li) {
    li = el('li', undefined, 'message agent streaming');
    li.dataset.stream = d.streamId;
    li.dataset.sender = d.sender.id;
    li.dir = 'auto';
    li.append(el('span', d.sender.name, 'sender text'));
    li.append(el('span', '', 'text body'));
    list.append(li);
  }
  li.querySelector('.body').textContent += d.delta;
}

function showActivity(a) {
  const what = {
    thinking: ' is thinking…',
    tool: ' is using ' + (a.tool || 'a tool') + '…',
    error: ': ' + (a.detail || 'its cycle failed'),
  }[a.activity];
  $('activity').textContent = what ? a.sender.name + what : '';
}

/** Parses SSE frames out of `buffer`; returns what is left (an unfinished frame). */
function frames(buffer, handle) {
  let cut;
  while ((cut = buffer.indexOf('\n\n')) >= 0) {
    const frame = buffer.slice(0, cut);
    buffer = buffer.slice(cut + 2);
    let event = 'message';
    const data = [];
    for (const line of frame.split('\n')) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (data.length) handle(event, data.join('\n'));
  }
  return buffer;
}

async function stream(space) {
  while (open === space) {
    try {
      const headers = { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN) };
      if (space.last) headers['Last-Event-ID'] = space.last;
      const r = await fetch(path(space.ns, space.name) + '/stream', {
        headers, signal: space.abort.signal,
      });
      if (!r.ok) throw new Error('HTTP ' + r.status);
      const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = frames(buffer + value.replace(/\r\n/g, '\n'), (event, data) => {
          const v = JSON.parse(data);
          if (event === 'message') addMessage(v);
          else if (event === 'delta') addDelta(v);
          else if (event === 'activity') showActivity(v);
        });
      }
    } catch (e) {
      if (space.abort.signal.aborted) return;
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

async function openSpace(ns, name, title) {
  closeSpace();
  const space = { ns, name, abort: new AbortController(), last: null };
  open = space;
  $('home').hidden = true;
  $('space').hidden = false;
  $('space-title').textContent = title;
  $('messages').replaceChildren();
  $('activity').textContent = '';
  const page = await api(path(ns, name) + '/messages?limit=50');
  for (const m of page.messages.slice().reverse()) addMessage(m);
  stream(space);
  $('message').focus();
}

function closeSpace() {
  if (open) open.abort.abort();
  open = null;
}

$('back').addEventListener('click', async () => {
  closeSpace();
  $('space').hidden = true;
  $('home').hidden = false;
  await enter();
});

$('send-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('message').value;
  if (!open || !text.trim()) return;
  $('send-error').textContent = '';
  const r = await fetch(path(open.ns, open.name) + '/messages', {
    method: 'POST',
    headers: {
      Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN),
      'Content-Type': 'application/json',
    },
    body: JSON.stringify({ text }),
  });
  if (r.ok) {
    $('message').value = '';
  } else {
    const body = await r.json().catch(() => null);
    $('send-error').textContent = body && body.error ? body.error.message : 'HTTP ' + r.status;
  }
});

async function enter() {
  const me = await api('/v1/me');
  $('who').textContent = me.name + ' (' + me.kind + ')';
  $('signin').hidden = true;
  $('home').hidden = false;
  $('signout').hidden = false;
  const [spaces, calls] = await Promise.all([api('/v1/spaces'), api('/v1/calls')]);
  showSpaces(spaces);
  showCalls(calls);
}

function signOut() {
  closeSpace();
  $('space').hidden = true;
  sessionStorage.removeItem(TOKEN);
  $('who').textContent = '';
  $('home').hidden = true;
  $('signout').hidden = true;
  $('signin').hidden = false;
}

$('signin-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const token = $('token').value.trim();
  $('token').value = '';
  $('signin-error').textContent = '';
  if (!token) return;
  sessionStorage.setItem(TOKEN, token);
  try {
    await enter();
  } catch (e) {
    signOut();
    $('signin-error').textContent = e.status === 401 ? 'That token is not known here.' : e.message;
  }
});

$('signout').addEventListener('click', signOut);

if (sessionStorage.getItem(TOKEN)) {
  enter().catch(() => signOut());
}
