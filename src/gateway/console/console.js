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
