// One cycle of an agent as its record tells it (issue 43): how it ended and why, what it woke
// for, then each step — its model request's times and tokens, the model's own text (which
// reaches no space), each call with its arguments and result, what the worker noted. Every
// text is the record's, masked and cut by the worker, and goes into the page as text only.
import { el, link, seg, when } from './dom.js';

/** How each outcome is said. */
export const OUTCOMES = {
  committed: 'Committed',
  skipped: 'Skipped (rolled back: only its events were acknowledged)',
  failed: 'Failed',
  paused: 'Paused for a person’s answer',
};

/** `ms` as a person reads a duration. */
export function duration(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  const s = Math.round(ms / 1000);
  return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
}

/** Tokens in, of them cached, and out. */
export function tokens(t) {
  if (!t) return '—';
  return t.input.toLocaleString() + ' in' +
    (t.cached ? ' (' + t.cached.toLocaleString() + ' cached)' : '') +
    ' · ' + t.output.toLocaleString() + ' out';
}

export function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1048576) return (n / 1024).toFixed(n < 10240 ? 1 : 0) + ' KiB';
  return (n / 1048576).toFixed(n < 10485760 ? 1 : 0).replace(/\.0$/, '') + ' MiB';
}

/** An outcome as a badge (`data-outcome` says it to scripts). */
export function outcome(o) {
  const s = el('span', o || 'unknown', 'outcome ' + (o || 'unknown'));
  s.dataset.outcome = o || 'unknown';
  s.title = OUTCOMES[o] || '';
  return s;
}

/** What a `…Cut` count says. */
function cut(n, what) {
  return el('span', '… ' + n.toLocaleString() + ' ' + what + ' cut', 'cut');
}

/** `text` pre-wrapped, with what was cut of it. */
function block(text, cls, dropped) {
  const pre = el('pre', text, 'text ' + cls);
  pre.dir = 'auto';
  if (!dropped) return pre;
  const box = el('div');
  box.append(pre, cut(dropped, dropped === 1 ? 'byte' : 'bytes'));
  return box;
}

/** JSON text made readable when whole (as the model or the tool wrote it otherwise). */
function readable(text, dropped) {
  if (dropped || text === undefined || text === null) return text;
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (e) {
    return text;
  }
}

/** The link of a cycle's trace, when it is one to a web page. */
function trace(url) {
  let u;
  try {
    u = new URL(url);
  } catch (e) {
    return null;
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return null;
  const a = el('a', 'Trace', 'trace');
  a.href = u.href;
  a.target = '_blank';
  a.rel = 'noopener noreferrer';
  return a;
}

/**
 * The page of cycle record `r` (a CycleView) of agent `ns/name`; `message`, when given, is
 * the message it posted that led here.
 */
export function cycleView(r, ns, name, message) {
  const agent = '#/agents/' + seg(ns) + '/' + seg(name);
  const page = [];
  const crumbs = el('p', undefined, 'crumbs meta');
  crumbs.append(link(ns + '/' + name, agent), ' › ', link('cycles', agent + '/cycles'), ' › cycle ' + r.seq);
  page.push(crumbs);
  const h = el('h2', 'Cycle ' + r.seq + ' ', 'text');
  h.append(outcome(r.outcome));
  page.push(h);
  if (message) page.push(el('p', 'This cycle posted message ' + message + '.', 'posted-this text'));
  if (r.outcome !== 'committed' || r.reason) {
    const said = el('p', OUTCOMES[r.outcome] || r.outcome || 'No outcome recorded', 'ended');
    if (r.reason) said.append(': ', el('span', r.reason, 'reason text'));
    page.push(said);
  }

  const facts = el('dl', undefined, 'facts');
  const fact = (term, ...value) => {
    const dd = el('dd', undefined, 'text');
    dd.append(...value);
    facts.append(el('dt', term), dd);
  };
  fact('Started', when(r.startedMs));
  fact('Took', duration(r.durationMs));
  fact('Answered', r.party === 'members' ? 'the members of its spaces' : r.party);
  fact('Checkpoint', r.checkpoint !== undefined && r.checkpoint !== null
    ? 'cycle ' + r.checkpoint + ' of its consciousness' : 'none: nothing of it was committed');
  if (r.resumed) fact('Resumed', 'yes: it went on from its journal (paused or stopped before)');
  fact('Tokens', tokens(r.tokens));
  if (r.posted && r.posted.length) {
    const posted = el('span');
    r.posted.forEach((p, i) => {
      if (i) posted.append(', ');
      const a = link(p.space, '#/spaces/' + seg(ns) + '/' + seg(p.space), 'posted');
      a.dataset.message = p.id;
      posted.append(a, ' (' + p.id + ')');
    });
    fact('Posted', posted);
  }
  fact('Record', bytes(r.bytes || 0) + ' kept');
  const t = r.traceUrl ? trace(r.traceUrl) : null;
  if (t) fact('Trace', t);
  else if (r.traceId) fact('Trace', r.traceId);
  page.push(facts);

  page.push(el('h3', 'What it woke for'));
  page.push(events(r.events || [], r.eventsCut));
  page.push(el('h3', 'Steps'));
  page.push(steps(r.steps || [], r.stepsCut));
  return page;
}

function events(list, dropped) {
  if (list.length === 0 && !dropped) return el('p', 'No event (a cycle of its own).', 'empty');
  const ol = el('ol', undefined, 'events');
  for (const e of list) {
    const li = el('li', undefined, 'event');
    li.dataset.id = e.id;
    const meta = el('div', e.kind, 'meta text');
    if (e.from) meta.append(' from ' + e.from);
    if (e.space) meta.append(' in ' + e.space);
    meta.append(' · ' + when(e.timeMs));
    li.append(meta, block(e.text, 'event-text', e.textCut));
    ol.append(li);
  }
  if (dropped) {
    const li = el('li', undefined, 'more');
    li.append(cut(dropped, dropped === 1 ? 'event' : 'events'));
    ol.append(li);
  }
  return ol;
}

function steps(list, dropped) {
  if (list.length === 0) return el('p', 'No step recorded.', 'empty');
  const ol = el('ol', undefined, 'steps');
  let previous = null;
  for (const s of list) {
    // Steps not kept are between the first and the last: their numbers say where.
    if (previous !== null && s.step > previous + 1) {
      const gap = el('li', undefined, 'more');
      gap.append(cut(s.step - previous - 1, s.step - previous - 1 === 1 ? 'step' : 'steps'));
      ol.append(gap);
    }
    previous = s.step;
    ol.append(step(s));
  }
  if (dropped && !ol.querySelector('li.more')) {
    const li = el('li', undefined, 'more');
    li.append(cut(dropped, dropped === 1 ? 'step' : 'steps'));
    ol.append(li);
  }
  return ol;
}

function step(s) {
  const li = el('li', undefined, 'step');
  li.dataset.step = s.step;
  const head = el('div', undefined, 'step-head');
  head.append(el('strong', 'Step ' + (s.step + 1)));
  // Which model answered: the Model of its list (a fallback's name shows it fell over).
  const times = ['at +' + duration(s.offsetMs), 'model ' + (s.model ? s.model + ' ' : '') + duration(s.durationMs)];
  if (s.firstTokenMs !== undefined && s.firstTokenMs !== null) times.push('first token ' + duration(s.firstTokenMs));
  times.push(tokens(s.tokens));
  if (s.finish) times.push('finish: ' + s.finish);
  head.append(el('span', ' ' + times.join(' · '), 'meta text'));
  li.append(head);
  if (s.text !== undefined && s.text !== null) {
    li.append(el('div', 'Its own text (it reaches no space):', 'meta'), block(s.text, 'private', s.textCut));
  }
  if (s.calls && s.calls.length) {
    const calls = el('ul', undefined, 'calls');
    for (const c of s.calls) calls.append(call(c));
    if (s.callsCut) {
      const more = el('li', undefined, 'more');
      more.append(cut(s.callsCut, s.callsCut === 1 ? 'call' : 'calls'));
      calls.append(more);
    }
    li.append(calls);
  } else if (s.callsCut) {
    li.append(cut(s.callsCut, 'calls'));
  }
  if (s.notes && s.notes.length) {
    const notes = el('ul', undefined, 'notes');
    for (const n of s.notes) notes.append(el('li', n, 'note text'));
    li.append(notes);
  }
  return li;
}

function call(c) {
  const li = el('li', undefined, 'call');
  li.dataset.tool = c.tool;
  const state = c.ok === true ? 'ok' : c.ok === false ? 'error' : 'waiting';
  li.dataset.ok = state;
  const head = el('div', undefined, 'call-head');
  head.append(el('strong', c.tool, 'tool text'), ' ',
    el('span', { ok: 'ok', error: 'error', waiting: 'no result yet' }[state], 'result-state ' + state),
    el('span', ' · ' + duration(c.durationMs), 'meta'));
  li.append(head);
  li.append(el('div', 'Arguments', 'meta'), block(readable(c.arguments, c.argumentsCut), 'arguments', c.argumentsCut));
  if (c.result !== undefined && c.result !== null) {
    li.append(el('div', 'Result', 'meta'), block(readable(c.result, c.resultCut), 'result', c.resultCut));
  }
  return li;
}
