// An agent's cycles (issue 43): the records it keeps, newest first and paged
// (`#/agents/NS/NAME/cycles`); one cycle (`…/cycles/SEQ`, drawn by cycle.js); and "why did it
// say this?" (`…/why/MESSAGE`): the cycle that posted a message. Who may read the agent's
// consciousness may read its records (`get agents/consciousness`); an agent keeps only its
// newest ones (`spec.cycle.records`, a count and bytes), so an old cycle's may be gone.
import { api, el, link, seg, stamp } from './dom.js';
import { bytes, cycleView, duration, outcome, tokens } from './cycle.js';

const PAGE = 25;

function path(ns, name) {
  return '/v1/agents/' + seg(ns) + '/' + seg(name) + '/cycles';
}

function hash(ns, name) {
  return '#/agents/' + seg(ns) + '/' + seg(name);
}

/** The way back: the agent, its cycles, and where this is. */
function crumbs(ns, name, here) {
  const p = el('p', undefined, 'crumbs meta');
  p.append(link(ns + '/' + name, hash(ns, name)), ' › ');
  if (here) p.append(link('cycles', hash(ns, name) + '/cycles'), ' › ' + here);
  else p.append('cycles');
  return p;
}

/** What the page says for an answer that is not the records: a refusal in words, a record
 * gone (`none` says why that may be), or the error thrown on (to the page's error line). */
function refusal(e, none) {
  if (e.status === 403) {
    const p = el('p', 'You may not read this agent’s cycles (RBAC: get agents/consciousness).', 'empty forbidden');
    p.setAttribute('role', 'alert');
    return p;
  }
  if (e.status === 404 && none) return el('p', e.message + '. ' + none, 'empty gone text');
  throw e;
}

/** How many records the agent keeps, when the page says. */
function kept(page) {
  if (!page.keep) return 'an agent keeps the records of its newest cycles only';
  return 'it keeps the records of its newest ' + page.keep.toLocaleString() + ' cycles' +
    (page.maxBytes ? ' (in at most ' + bytes(page.maxBytes) + ')' : '');
}

/** Loads `get` into `box`, or says why not under `back`. */
async function load(box, current, get, back, none) {
  try {
    return await get();
  } catch (e) {
    if (!current()) return null;
    box.replaceChildren();
    box.append(back, refusal(e, none));
    return null;
  }
}

/** The heads of agent `ns/name`'s cycles in `box`, with older ones a click away. */
export async function cyclesPage(box, ns, name, current) {
  box.replaceChildren(el('p', 'Looking for its cycles…', 'meta'));
  delete box.dataset.seq;
  const page = await load(box, current, () => api(path(ns, name) + '?limit=' + PAGE), crumbs(ns, name), null);
  if (!page || !current()) return;
  const keeps = el('p', 'What each cycle did, newest first: ' + kept(page) + ', older ones forgotten.', 'meta');
  const table = el('table', undefined, 'cycles-list');
  const head = el('tr');
  for (const h of ['Cycle', 'Started', 'Took', 'Outcome', 'Steps', 'Calls', 'Tokens', 'Checkpoint', 'Reason']) {
    head.append(el('th', h));
  }
  table.append(head);
  const older = el('button', 'Older', 'older');
  older.type = 'button';
  older.id = 'cycles-older';
  const more = (p) => {
    for (const c of p.cycles) table.append(row(c, ns, name));
    older.hidden = p.nextBefore === undefined || p.nextBefore === null;
    older.dataset.before = older.hidden ? '' : p.nextBefore;
  };
  more(page);
  older.addEventListener('click', async () => {
    older.disabled = true;
    try {
      const p = await api(path(ns, name) + '?limit=' + PAGE + '&before=' + seg(older.dataset.before));
      if (current()) more(p);
    } catch (e) {
      if (current()) box.append(refusal(e, 'An agent keeps only its newest records.'));
    } finally {
      older.disabled = false;
    }
  });
  const rehearsals = el('p', undefined, 'meta');
  rehearsals.append('Changes tried on these cycles before going live: ',
    link('rehearsals', hash(ns, name) + '/rehearsals', 'rehearsals-link'), '.');
  box.replaceChildren(crumbs(ns, name), el('h2', 'Cycles of ' + ns + '/' + name, 'text'), keeps, rehearsals,
    page.cycles.length ? table : el('p', 'No cycle recorded yet.', 'empty'), older);
}

function row(c, ns, name) {
  const tr = el('tr');
  tr.dataset.seq = c.seq;
  const cells = [
    link(String(c.seq), hash(ns, name) + '/cycles/' + c.seq, 'cycle'),
    stamp(c.startedMs),
    duration(c.durationMs),
    outcome(c.outcome),
    c.steps,
    c.calls,
    c.tokens.input.toLocaleString() + ' in · ' + c.tokens.output.toLocaleString() + ' out',
    c.checkpoint !== undefined && c.checkpoint !== null ? c.checkpoint : '—',
    c.reason || '',
  ];
  for (const v of cells) {
    const td = el('td', v instanceof Node ? undefined : v, 'text');
    if (v instanceof Node) td.append(v);
    tr.append(td);
  }
  tr.cells[6].title = tokens(c.tokens);
  return tr;
}

/** Cycle `seq` of agent `ns/name` in `box`. */
export async function cyclePage(box, ns, name, seq, current) {
  box.replaceChildren(el('p', 'Looking for cycle ' + seq + '…', 'meta'));
  delete box.dataset.seq;
  if (!/^[0-9]+$/.test(seq)) throw new Error('no cycle "' + seq + '"');
  const r = await load(box, current, () => api(path(ns, name) + '/' + seg(seq)),
    crumbs(ns, name, 'cycle ' + seq), 'An agent keeps the records of its newest cycles only.');
  if (!r || !current()) return;
  box.dataset.seq = r.seq;
  box.replaceChildren(...cycleView(r, ns, name));
}

/** The cycle of agent `ns/name` that posted message `id`, in `box`: "why did it say this?" */
export async function whyPage(box, ns, name, id, current) {
  box.replaceChildren(el('p', 'Looking for the cycle that posted it…', 'meta'));
  delete box.dataset.seq;
  const back = crumbs(ns, name, 'why it posted ' + id);
  const page = await load(box, current,
    () => api(path(ns, name) + '?limit=1&message=' + seg(id)), back, null);
  if (!page || !current()) return;
  if (page.cycles.length === 0) {
    box.replaceChildren(back, el('p', 'No record that ' + ns + '/' + name + ' keeps says why it posted ' +
      id + ': ' + kept(page) + ', and the one that posted it is gone (or it did not post it).', 'empty gone text'));
    return;
  }
  const seq = String(page.cycles[0].seq);
  const r = await load(box, current, () => api(path(ns, name) + '/' + seg(seq)), back,
    'The record of cycle ' + seq + ' is gone: an agent keeps the records of its newest cycles only.');
  if (!r || !current()) return;
  box.dataset.seq = r.seq;
  box.replaceChildren(...cycleView(r, ns, name, id));
}
