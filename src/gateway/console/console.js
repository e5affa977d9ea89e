// The agentfleet console: plain DOM, no library, no HTML strings. Every text from the gateway
// (agents, people, tools, models) goes into the page with textContent only; the page's
// Content-Security-Policy (Trusted Types) makes any HTML sink throw.
//
// Pages are fragments, so that a link to one (`#/calls/ID` in an alert) never sends what it
// names to a server log: `#/` the spaces and the calls waiting, `#/spaces/NS/NAME` a space,
// `#/calls/ID` one call to answer, `#/agents` the fleet, `#/agents/NS/NAME` an agent,
// `#/agents/NS/NAME/cycles` its cycles, `…/cycles/SEQ` one of them, `…/why/MESSAGE` the cycle
// that posted a message, `…/rehearsals` its rehearsals and `…/rehearsals/RNAME` one of them.
import { TOKEN, api, el, link, seg, stamp, when } from './dom.js';
import { check, form } from './schema.js';
import { agentPage } from './agent.js';
import { markdown } from './markdown.js';
import { fleetPage } from './fleet.js';
import { cyclePage, cyclesPage, whyPage } from './cycles.js';
import { rehearsalPage, rehearsalsPage } from './rehearsals.js';

const $ = (id) => document.getElementById(id);
const PAGES = ['home', 'space', 'call', 'agent', 'fleet', 'cycles'];

function spacePath(ns, name) {
  return '/v1/spaces/' + seg(ns) + '/' + seg(name);
}

function show(page) {
  for (const p of PAGES) $(p).hidden = p !== page;
}

// ---- Home: the spaces and what waits for this person.

function showSpaces(list) {
  const ul = $('spaces');
  ul.replaceChildren();
  if (list.spaces.length === 0) ul.append(el('li', 'You are in no space.', 'empty'));
  for (const s of list.spaces) {
    const li = el('li');
    li.dataset.space = s.namespace + '/' + s.name;
    li.append(link(s.displayName, '#/spaces/' + seg(s.namespace) + '/' + seg(s.name), 'name text'));
    const members = el('div', s.namespace + '/' + s.name + ' · ', 'meta text');
    s.members.forEach((m, i) => {
      if (i) members.append(', ');
      members.append(m.kind === 'agent'
        ? link(m.name, '#/agents/' + seg(s.namespace) + '/' + seg(m.id))
        : m.name);
    });
    li.append(members);
    ul.append(li);
  }
}

function callItem(c) {
  const li = el('li');
  li.dataset.call = c.callId;
  const head = el('div', undefined, 'name text');
  head.append(link(c.agent, '#/agents/' + seg(c.namespace) + '/' + seg(c.agent)),
    ' asks: ' + c.tool + ' (' + c.kind + ') ',
    link('Answer', '#/calls/' + seg(c.callId), 'answer'));
  li.append(head);
  li.append(el('div', JSON.stringify(c.arguments), 'text'));
  li.append(el('div', 'in ' + c.namespace + '/' + c.space + ' since ' + when(c.sinceMs) +
    ', until ' + when(c.expiresMs), 'meta text'));
  return li;
}

function showCalls(ul, calls, none) {
  ul.replaceChildren();
  if (calls.length === 0 && none) ul.append(el('li', none, 'empty'));
  for (const c of calls) ul.append(callItem(c));
}

async function home(visit) {
  show('home');
  const [spaces, calls] = await Promise.all([api('/v1/spaces'), api('/v1/calls')]);
  if (visit !== visits) return;
  showSpaces(spaces);
  showCalls($('calls'), calls.calls.filter((c) => c.mayAnswer !== false), 'Nothing waits for you.');
}

// ---- A space: its messages, live (SSE over fetch, since EventSource cannot send the token),
// resumed after a dropped connection from the last message id; older ones by scrolling up;
// the calls waiting in it; and sending, to everyone or to one agent.

let open = null; // {ns, name, abort, last, older, loading}

function messageItem(m) {
  const li = el('li', undefined, m.sender.kind === 'agent' ? 'message agent' : 'message');
  li.dataset.id = m.id;
  li.dir = 'auto';
  li.append(el('span', m.sender.name, 'sender text'));
  if (m.mention) li.append(el('span', '→ ' + m.mention, 'mention text'));
  li.append(stamp(m.timeMs));
  if (m.sender.kind === 'agent' && open) {
    // Why did it say this? The cycle that posted it, for whom may read the agent's records.
    const why = link('why?', '#/agents/' + seg(open.ns) + '/' + seg(m.sender.id) + '/why/' + seg(m.id), 'why');
    why.title = 'The cycle of ' + m.sender.name + ' that posted this';
    li.append(why);
  }
  // An agent's Markdown is rendered (as text nodes only); a person's words stay as typed.
  if (m.sender.kind === 'agent') {
    const body = markdown(m.text);
    body.classList.add('text');
    li.append(body);
  } else {
    li.append(el('span', m.text, 'text'));
  }
  return li;
}

/** Message ids (`MILLIS-SEQ`) in posting order. */
function before(a, b) {
  const [am, as] = a.split('-').map(Number);
  const [bm, bs] = b.split('-').map(Number);
  return am < bm || (am === bm && as < bs);
}

/** Shows `m` in its place by id (the page, the live stream and older pages may come in any
 * order), once. */
function addMessage(m) {
  const list = $('messages');
  if (list.querySelector('li[data-id="' + CSS.escape(m.id) + '"]')) return;
  // The agent's streamed draft gives way to the message it became.
  for (const d of list.querySelectorAll('li.streaming')) {
    if (d.dataset.sender === m.sender.id) d.remove();
  }
  const bottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  let next = null;
  for (let li = list.lastElementChild; li; li = li.previousElementSibling) {
    if (li.dataset.id && !before(m.id, li.dataset.id)) break;
    if (li.dataset.id) next = li;
  }
  list.insertBefore(messageItem(m), next);
  if (bottom) list.scrollTop = list.scrollHeight;
  if (open && (!open.last || before(open.last, m.id))) open.last = m.id;
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

async function waitingHere(space) {
  const calls = await api('/v1/calls');
  if (open !== space) return;
  showCalls($('space-calls'), calls.calls.filter((c) => c.namespace === space.ns && c.space === space.name));
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

/** The space's stream ends for good: the gateway said why (the token is no longer known,
 * or the caller is no longer a member). */
function streamEnded(space, status, message) {
  if (open !== space) return;
  closeSpace();
  if (status === 401) return signOut();
  $('page-error').textContent = message;
}

async function stream(space) {
  let wait = 1000;
  while (open === space) {
    try {
      const headers = { Authorization: 'Bearer ' + sessionStorage.getItem(TOKEN) };
      if (space.last) headers['Last-Event-ID'] = space.last;
      const r = await fetch(spacePath(space.ns, space.name) + '/stream', {
        headers, signal: space.abort.signal,
      });
      if ([401, 403, 404].includes(r.status)) {
        const body = await r.json().catch(() => null);
        return streamEnded(space, r.status, body && body.error ? body.error.message : 'HTTP ' + r.status);
      }
      if (!r.ok) throw new Error('HTTP ' + r.status);
      $('space').dataset.live = space.ns + '/' + space.name;
      wait = 1000;
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
          else if (event === 'tool_request') waitingHere(space).catch(() => {});
          else if (event === 'error' && v.error) {
            // For good when the caller may no longer read the space; else it comes back.
            const status = { unauthenticated: 401, not_member: 403, not_found: 404 }[v.error.code];
            if (status) streamEnded(space, status, v.error.message);
          }
        });
      }
    } catch (e) {
      if (space.abort.signal.aborted) return;
    }
    if (open !== space) return;
    delete $('space').dataset.live;
    // Again in a second, then less often while the gateway stays away (at most every 15 s).
    await new Promise((ok) => setTimeout(ok, wait));
    wait = Math.min(wait * 2, 15000);
  }
}

/** The page of messages before the oldest shown, kept in place on the screen. */
async function older(space) {
  if (!space.older || space.loading) return;
  space.loading = true;
  try {
    const page = await api(spacePath(space.ns, space.name) + '/messages?limit=50&before=' + seg(space.older));
    if (open !== space) return;
    const list = $('messages');
    const from = list.scrollHeight - list.scrollTop;
    for (const m of page.messages) addMessage(m);
    list.scrollTop = list.scrollHeight - from;
    space.older = page.next || null;
  } finally {
    space.loading = false;
  }
}

async function spacePage(ns, name) {
  closeSpace();
  const space = { ns, name, abort: new AbortController(), last: null, older: null, loading: false };
  open = space;
  show('space');
  $('messages').replaceChildren();
  $('space-calls').replaceChildren();
  $('activity').textContent = '';
  $('send-error').textContent = '';
  // The stream first, then the last page: a message posted in between is in one or the other
  // (shown once, in its place).
  stream(space);
  const [info, page] = await Promise.all([
    api(spacePath(ns, name)),
    api(spacePath(ns, name) + '/messages?limit=50'),
  ]);
  if (open !== space) return;
  $('space-title').textContent = info.displayName;
  const to = $('mention');
  to.replaceChildren(el('option', 'everyone'));
  to.firstChild.value = '';
  for (const m of info.members.filter((m) => m.kind === 'agent')) {
    const o = el('option', m.name);
    o.value = m.id;
    to.append(o);
  }
  for (const m of page.messages.slice().reverse()) addMessage(m);
  const list = $('messages');
  list.scrollTop = list.scrollHeight;
  space.older = page.next || null;
  waitingHere(space).catch(() => {});
  $('message').focus();
}

function closeSpace() {
  if (open) open.abort.abort();
  open = null;
  delete $('space').dataset.live;
}

$('messages').addEventListener('scroll', () => {
  if (open && $('messages').scrollTop < 80) older(open).catch(() => {});
});

$('send-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const text = $('message').value;
  if (!open || !text.trim()) return;
  $('send-error').textContent = '';
  const body = { text };
  if ($('mention').value) body.mention = $('mention').value;
  try {
    await api(spacePath(open.ns, open.name) + '/messages', body);
    $('message').value = '';
  } catch (e) {
    $('send-error').textContent = e.message;
  }
});

// ---- One call: approve or deny it with a reason, or answer it with the form its schema makes.

async function callPage(id, visit) {
  show('call');
  const box = $('call-body');
  delete box.dataset.call;
  box.replaceChildren(el('p', 'Looking for the call…', 'meta'));
  const calls = await api('/v1/calls');
  if (visit !== visits) return;
  const c = calls.calls.find((x) => x.callId === id);
  box.replaceChildren();
  if (!c) {
    box.append(el('p', 'No call ' + id + ' waits for you: it was answered, it ran out of time, ' +
      'or it was asked in a space you are not in.', 'empty text'));
    return;
  }
  box.dataset.call = c.callId;
  const head = el('h2', undefined, 'text');
  head.append(link(c.agent, '#/agents/' + seg(c.namespace) + '/' + seg(c.agent)), ' asks: ' + c.tool);
  box.append(head);
  const where = el('p', c.kind === 'approval' ? 'To run this call, in ' : 'For an answer, in ', 'meta text');
  // An A2A conversation is its caller's: a named approver answers the call, and reads
  // nothing else of it.
  where.append(c.space.startsWith('a2a_') ? 'an A2A conversation'
    : link(c.namespace + '/' + c.space, '#/spaces/' + seg(c.namespace) + '/' + seg(c.space)),
    '; asked ' + when(c.sinceMs) + ', waits until ' + when(c.expiresMs) + '.');
  box.append(where, el('pre', JSON.stringify(c.arguments, null, 2), 'arguments text'));
  if (c.mayAnswer === false) {
    const who = c.approvers && c.approvers.length ? c.approvers.join(' or ') : 'the humans of ' + c.space;
    box.append(el('p', 'Only ' + who + ' may answer this call.', 'empty text'));
    return;
  }
  const f = el('form', undefined, 'answer-form');
  f.noValidate = true;
  const problems = el('ul', undefined, 'problems');
  const outcome = el('p', '', 'outcome');
  outcome.setAttribute('role', 'status');
  const answer = async (body) => {
    problems.replaceChildren();
    outcome.textContent = '';
    outcome.classList.remove('error');
    try {
      const done = await api(spacePath(c.namespace, c.space) + '/tool-calls/' + seg(c.callId), body);
      outcome.textContent = { approved: 'Approved', denied: 'Denied', answered: 'Answered' }[done.decision] +
        '. ' + c.agent + ' goes on.';
      for (const b of f.querySelectorAll('button, input, select, textarea')) b.disabled = true;
    } catch (e) {
      outcome.textContent = e.message;
      outcome.classList.add('error');
    }
  };
  if (c.kind === 'approval') {
    const reason = el('input');
    reason.id = 'reason';
    reason.type = 'text';
    reason.placeholder = 'Reason (optional)';
    reason.setAttribute('aria-label', 'Reason');
    const approve = el('button', 'Approve', 'approve');
    approve.type = 'button';
    const deny = el('button', 'Deny', 'deny');
    deny.type = 'button';
    const decide = (decision) => () => {
      const body = { decision };
      if (reason.value.trim()) body.reason = reason.value.trim();
      answer(body);
    };
    approve.addEventListener('click', decide('approve'));
    deny.addEventListener('click', decide('deny'));
    f.addEventListener('submit', (ev) => ev.preventDefault());
    f.append(reason, approve, deny);
  } else {
    const fields = el('div', undefined, 'fields');
    const read = form(fields, c.resultSchema);
    const send = el('button', 'Send answer', 'send-answer');
    send.type = 'submit';
    f.append(fields, send);
    f.addEventListener('submit', (ev) => {
      ev.preventDefault();
      problems.replaceChildren();
      outcome.textContent = '';
      let value;
      try {
        value = read();
      } catch (e) {
        problems.append(el('li', e.message, 'text'));
        return;
      }
      const wrong = check(c.resultSchema, value);
      if (wrong.length) {
        for (const w of wrong) problems.append(el('li', (w.path || 'the answer') + ' ' + w.message, 'text'));
        return;
      }
      answer({ result: value });
    });
  }
  box.append(f, problems, outcome);
}

// ---- Signing in and out, and the pages.

let visits = 0; // pages opened: an answer that comes after another page opened is dropped

async function route() {
  const visit = ++visits;
  const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const [page, n] = [parts[0], parts.length];
  if (!(page === 'spaces' && n === 3)) closeSpace();
  if (page === 'spaces' && n === 3) return spacePage(parts[1], parts[2]);
  if (page === 'calls' && n === 2) return callPage(parts[1], visit);
  if (page === 'agents' && n === 3) {
    show('agent');
    return agentPage($('agent-body'), parts[1], parts[2], () => visit === visits);
  }
  if (page === 'agents' && n === 4 && parts[3] === 'cycles') {
    show('cycles');
    return cyclesPage($('cycles-body'), parts[1], parts[2], () => visit === visits);
  }
  if (page === 'agents' && n === 5 && parts[3] === 'cycles') {
    show('cycles');
    return cyclePage($('cycles-body'), parts[1], parts[2], parts[4], () => visit === visits);
  }
  if (page === 'agents' && n === 4 && parts[3] === 'rehearsals') {
    show('cycles');
    return rehearsalsPage($('cycles-body'), parts[1], parts[2], () => visit === visits);
  }
  if (page === 'agents' && n === 5 && parts[3] === 'rehearsals') {
    show('cycles');
    return rehearsalPage($('cycles-body'), parts[1], parts[2], parts[4], () => visit === visits);
  }
  if (page === 'agents' && n === 5 && parts[3] === 'why') {
    show('cycles');
    return whyPage($('cycles-body'), parts[1], parts[2], parts[4], () => visit === visits);
  }
  if (page === 'agents' && n === 1) {
    show('fleet');
    return fleetPage($('fleet-body'), () => visit === visits);
  }
  return home(visit);
}

async function routeShowingErrors() {
  $('page-error').textContent = '';
  try {
    await route();
  } catch (e) {
    if (e.status === 401) return signOut();
    $('page-error').textContent = e.message;
  }
}

async function enter() {
  const me = await api('/v1/me');
  $('who').textContent = me.name + ' (' + me.kind + ')';
  $('signin').hidden = true;
  $('signout').hidden = false;
  $('nav').hidden = false;
  await routeShowingErrors();
}

function signOut() {
  closeSpace();
  sessionStorage.removeItem(TOKEN);
  $('who').textContent = '';
  show(null);
  $('signout').hidden = true;
  $('nav').hidden = true;
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

window.addEventListener('hashchange', () => {
  if (sessionStorage.getItem(TOKEN)) routeShowingErrors();
});

if (sessionStorage.getItem(TOKEN)) {
  // A token the gateway no longer knows is forgotten; any other failure (the gateway away)
  // keeps it, to try again with a reload.
  enter().catch((e) => {
    if (e.status === 401) signOut();
    else $('page-error').textContent = e.message;
  });
}
