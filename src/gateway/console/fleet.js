// The fleet at a glance: every agent of the person's spaces (`GET /v1/agents`) in one table —
// state, model, spend today against its budget, last cycle and how it ended (leading to its
// cycles), what is wrong, tools ready, the process that runs it, the pool it runs in —
// sortable by any column and filtered by state. Each agent links to its page.

import { api, el, link, seg, when } from './dom.js';
import { STATES } from './agent.js';

let sort = { key: 'Agent', down: false }; // the column sorted by, kept across visits
let only = ''; // the state shown ('' : every state)

/** The columns: heading, the value sorted by, and the cell shown. */
const COLUMNS = [
  ['Agent', (a) => a.namespace + '/' + a.name,
    (a) => link(a.namespace + '/' + a.name, '#/agents/' + seg(a.namespace) + '/' + seg(a.name))],
  ['State', (a) => a.state, (a) => {
    const s = el('span', word(a.state), 'state ' + a.state);
    s.title = STATES[a.state] || '';
    return s;
  }],
  ['Model', (a) => a.modelProvider + '/' + a.modelName,
    (a) => el('span', a.modelProvider ? a.modelProvider + '/' + a.modelName : '—', 'text')],
  ['Today', (a) => a.tokensToday, (a) => el('span', a.tokensToday.toLocaleString() +
    (a.tokensPerDay ? ' of ' + a.tokensPerDay.toLocaleString() : ''), 'text')],
  ['Last cycle', (a) => a.lastCycleMs || 0, (a) => el('span', a.lastCycleMs ? when(a.lastCycleMs) : 'never')],
  ['Outcome', (a) => a.lastOutcome || '', outcome],
  ['Wrong', (a) => problem(a), (a) => el('span', problem(a), 'text error')],
  ['Tools ready', (a) => ready(a), (a) => el('span', a.tools.length ? ready(a) + ' of ' + a.tools.length : '—')],
  ['Host', (a) => a.host || '', (a) => el('span', a.host || '—', 'text')],
  ['Pool', (a) => a.pool || '', (a) => el('span', a.pool || '—', 'text')],
];

/** How its last cycle ended: a link to its cycles. */
function outcome(a) {
  if (!a.lastOutcome) return el('span', '—');
  return link(a.lastOutcome, '#/agents/' + seg(a.namespace) + '/' + seg(a.name) + '/cycles',
    'outcome ' + a.lastOutcome);
}

/** A state in one word ("stopped" is asleep: the next event wakes it). */
function word(state) {
  return state === 'stopped' ? 'asleep' : state;
}

function problem(a) {
  if (a.problem) return a.problem;
  if (a.modelHealth && a.modelHealth !== 'Available') return 'model: ' + a.modelHealth;
  return '';
}

function ready(a) {
  return a.tools.filter((t) => t.ready).length;
}

/** Shows the fleet in `box`; `current` says whether the page is still this one. */
export async function fleetPage(box, current) {
  const list = await api('/v1/agents');
  if (!current()) return;
  const agents = list.agents;
  const filter = el('select');
  filter.id = 'fleet-state';
  filter.setAttribute('aria-label', 'State');
  for (const s of ['', ...new Set(agents.map((a) => a.state))]) {
    const o = el('option', s === '' ? 'every state' : word(s));
    o.value = s;
    o.selected = s === only;
    filter.append(o);
  }
  const table = el('table', undefined, 'fleet');
  const draw = () => {
    const [, key] = COLUMNS.find(([h]) => h === sort.key) || COLUMNS[0];
    const rows = agents.filter((a) => !only || a.state === only).sort((x, y) => {
      const [a, b] = [key(x), key(y)];
      const order = typeof a === 'number' ? a - b : String(a).localeCompare(String(b));
      return sort.down ? -order : order;
    });
    const head = el('tr');
    for (const [h] of COLUMNS) {
      const th = el('th');
      const b = el('button', h + (sort.key === h ? (sort.down ? ' ▼' : ' ▲') : ''), 'sort');
      b.type = 'button';
      b.dataset.column = h;
      b.addEventListener('click', () => {
        sort = { key: h, down: sort.key === h ? !sort.down : false };
        draw();
      });
      th.append(b);
      head.append(th);
    }
    table.replaceChildren(head);
    for (const a of rows) {
      const tr = el('tr');
      tr.dataset.agent = a.namespace + '/' + a.name;
      for (const [, , cell] of COLUMNS) {
        const td = el('td');
        td.append(cell(a));
        tr.append(td);
      }
      table.append(tr);
    }
  };
  filter.addEventListener('change', () => {
    only = filter.value;
    draw();
  });
  draw();
  const count = el('p', agents.length + (agents.length === 1 ? ' agent' : ' agents') +
    ' in your spaces', 'meta');
  box.replaceChildren(el('h2', 'Agents'), count, filter,
    agents.length ? table : el('p', 'No agent in your spaces.', 'empty'));
}
