// An agent's rehearsals (issue 45): the reports its data plane keeps, newest first
// (`#/agents/NS/NAME/rehearsals`), and one of them (`…/rehearsals/RNAME`): each recorded cycle
// beside what the candidate did in its place, whether they agree, each row a link to the
// cycle it replayed. The rule is the cycles': `get agents/consciousness`.
import { api, el, link, seg, stamp } from './dom.js';

function path(ns, name) {
  return '/v1/agents/' + seg(ns) + '/' + seg(name) + '/rehearsals';
}

function hash(ns, name) {
  return '#/agents/' + seg(ns) + '/' + seg(name);
}

function crumbs(ns, name, here) {
  const p = el('p', undefined, 'crumbs meta');
  p.append(link(ns + '/' + name, hash(ns, name)), ' › ', link('cycles', hash(ns, name) + '/cycles'), ' › ');
  if (here) p.append(link('rehearsals', hash(ns, name) + '/rehearsals'), ' › ' + here);
  else p.append('rehearsals');
  return p;
}

function percent(x) {
  return Math.round((x || 0) * 100) + '%';
}

/** A verdict as a badge (`data-passed` says it to scripts). */
function verdict(summary, error) {
  const passed = !!(summary && summary.passed);
  const s = el('span', error ? 'could not run' : passed ? 'passed' : 'failed',
    'outcome ' + (passed ? 'committed' : 'failed'));
  s.dataset.passed = String(passed);
  return s;
}

async function load(box, current, get, back) {
  try {
    return await get();
  } catch (e) {
    if (!current()) return null;
    box.replaceChildren(back);
    if (e.status === 403) {
      const p = el('p', 'You may not read this agent’s rehearsals (RBAC: get agents/consciousness).', 'empty forbidden');
      p.setAttribute('role', 'alert');
      box.append(p);
      return null;
    }
    if (e.status === 404) {
      box.append(el('p', e.message + '.', 'empty gone text'));
      return null;
    }
    throw e;
  }
}

function cells(tr, values) {
  for (const v of values) {
    const td = el('td', v instanceof Node ? undefined : v, 'text');
    if (v instanceof Node) td.append(v);
    tr.append(td);
  }
}

/** The rehearsals of agent `ns/name` in `box`. */
export async function rehearsalsPage(box, ns, name, current) {
  box.replaceChildren(el('p', 'Looking for its rehearsals…', 'meta'));
  delete box.dataset.seq;
  const list = await load(box, current, () => api(path(ns, name)), crumbs(ns, name));
  if (!list || !current()) return;
  const table = el('table', undefined, 'rehearsals-list');
  const head = el('tr');
  for (const h of ['Rehearsal', 'Ended', 'Verdict', 'Replies agree', 'Tool calls agree', 'Cycles', 'Tokens (recorded)', 'Why']) {
    head.append(el('th', h));
  }
  table.append(head);
  for (const r of list.rehearsals) {
    const tr = el('tr');
    tr.dataset.name = r.name;
    const s = r.summary;
    cells(tr, [
      link(r.name, hash(ns, name) + '/rehearsals/' + seg(r.name), 'rehearsal'),
      stamp(r.timeMs),
      verdict(s, r.error),
      s ? percent(s.replyAgreement) : '—',
      s ? percent(s.toolAgreement) : '—',
      s ? s.rehearsed + (s.notRehearsed ? ' (+' + s.notRehearsed + ' not)' : '') : '—',
      s ? s.candidateTokens.toLocaleString() + ' (' + s.recordedTokens.toLocaleString() + ')' : '—',
      r.error || (s ? s.verdict : ''),
    ]);
    table.append(tr);
  }
  box.replaceChildren(crumbs(ns, name), el('h2', 'Rehearsals of ' + ns + '/' + name, 'text'),
    el('p', 'A change tried on the agent’s own recorded cycles before it went live, newest first (it keeps its newest 20).', 'meta'),
    list.rehearsals.length ? table : el('p', 'No rehearsal yet.', 'empty'));
}

/** What one decision shows: its outcome, where it posted, the tools it called. */
function decision(d) {
  if (!d) return '—';
  const span = el('span', undefined, 'decision');
  const badge = el('span', d.outcome, 'outcome ' + (d.outcome === 'replied' ? 'committed' : d.outcome));
  badge.dataset.outcome = d.outcome;
  span.append(badge);
  const more = [];
  if (d.to && d.to.length) more.push('to ' + d.to.join(', '));
  if (d.calls && d.calls.length) more.push(d.calls.map((c) => c.split(' ')[0]).join(', '));
  if (more.length) span.append(' ' + more.join(' · '));
  // The calls with their arguments, as text, on hover.
  span.title = (d.calls || []).join('\n');
  return span;
}

function agrees(v) {
  if (v === undefined || v === null) return '—';
  const s = el('span', v ? 'yes' : 'no', v ? 'agree' : 'disagree');
  s.dataset.agrees = String(v);
  return s;
}

/** Rehearsal `rname` of agent `ns/name` in `box`: each cycle beside the candidate's. */
export async function rehearsalPage(box, ns, name, rname, current) {
  box.replaceChildren(el('p', 'Looking for rehearsal ' + rname + '…', 'meta'));
  delete box.dataset.seq;
  const r = await load(box, current, () => api(path(ns, name) + '/' + seg(rname)), crumbs(ns, name, rname));
  if (!r || !current()) return;
  const h = el('h2', 'Rehearsal ' + r.name + ' ', 'text');
  h.append(verdict(r.report && r.report.summary, r.error));
  const why = el('p', r.error || r.report.summary.verdict, 'ended text');
  why.id = 'rehearsal-verdict';
  if (!r.report) {
    box.replaceChildren(crumbs(ns, name, rname), h, why);
    return;
  }
  const table = el('table', undefined, 'rehearsal-cycles');
  const head = el('tr');
  for (const t of ['Cycle', 'Ran', 'Recorded', 'Candidate', 'Reply agrees', 'Tools agree', 'Steps', 'Tokens', 'Notes']) {
    head.append(el('th', t));
  }
  table.append(head);
  for (const c of r.report.cycles) {
    const tr = el('tr');
    tr.dataset.seq = c.seq;
    const d = c.candidate;
    const notes = [];
    if (c.notRehearsed) notes.push('not rehearsed: ' + c.notRehearsed);
    if (c.notReplayed) notes.push(c.notReplayed + ' call(s) not replayed');
    if (c.inexact) notes.push('rebuilt from a cut record');
    cells(tr, [
      link(String(c.seq), hash(ns, name) + '/cycles/' + c.seq, 'cycle'),
      stamp(c.startedMs),
      decision(c.recorded),
      decision(d),
      agrees(c.replyAgrees),
      agrees(c.toolsAgree),
      c.recorded.steps + ' → ' + (d ? d.steps : '—'),
      c.recorded.tokens.toLocaleString() + ' → ' + (d ? d.tokens.toLocaleString() : '—'),
      notes.join('; '),
    ]);
    table.append(tr);
  }
  box.replaceChildren(crumbs(ns, name, rname), h, why,
    el('p', 'Each recorded cycle (a link to what it did) and what the candidate did in its place, with no effects: its calls got the recorded results where they matched.', 'meta'),
    table);
}
