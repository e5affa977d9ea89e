// An agent's page: what it is doing, its model, inbox, cycles (and a link to what each did),
// tokens against its budget, tools and last checkpoints (each to rewind to or fork from, see
// rewind.js), and a chart of its last cycles (inline SVG built with DOM calls, no library).
// Refreshed every five seconds while it is shown (redrawn only when something changed).
import { api, el, link, seg, when } from './dom.js';
import { checkpoints } from './rewind.js';

const SVG = 'http://www.w3.org/2000/svg';
export const STATES = {
  unknown: 'Not described by the operator yet (or no longer an Agent)',
  failed: 'Cannot run',
  suspended: 'Suspended (spec.paused): events wait until it is resumed',
  asking: 'Waiting for a person’s answer',
  thinking: 'Thinking',
  sleeping: 'Sleeping: a worker waits on its inbox',
  // No worker holds it now: asleep in its pool or scaled to zero (which, the gateway cannot
  // tell); either way it is not stopped.
  stopped: 'Asleep: the next event wakes it',
};

let tick = null; // the refresh of the agent shown
let shown = ''; // what it shows of the agent (as JSON): the same is not drawn again

/**
 * Shows agent `ns/name` in `box`, and keeps it fresh while the page stays on it; `current`
 * says whether it still does (an answer that comes later than another page is dropped).
 */
export async function agentPage(box, ns, name, current) {
  clearInterval(tick);
  shown = '';
  box.replaceChildren(el('p', 'Looking for the agent…', 'meta'));
  await render(box, ns, name, current);
  if (!current()) return;
  tick = setInterval(() => {
    if (!current() || box.parentElement.hidden) {
      clearInterval(tick);
      return;
    }
    render(box, ns, name, current).catch(() => {});
  }, 5000);
}

async function render(box, ns, name, current) {
  let a;
  try {
    a = await api('/v1/agents/' + seg(ns) + '/' + seg(name));
  } catch (e) {
    if (current()) box.replaceChildren();
    shown = '';
    throw e;
  }
  if (!current()) return;
  const json = JSON.stringify(a);
  if (json === shown) return;
  shown = json;
  const page = [];
  page.push(el('h2', a.namespace + '/' + a.name, 'text'));
  const state = el('p', STATES[a.state] || a.state, 'state ' + a.state);
  state.dataset.state = a.state;
  if (a.problem) state.append(': ', el('span', a.problem, 'text'));
  page.push(state);

  const facts = el('dl', undefined, 'facts');
  const fact = (term, ...value) => {
    const dd = el('dd', undefined, 'text');
    dd.append(...value);
    facts.append(el('dt', term), dd);
  };
  fact('Model', (a.modelProvider ? a.modelProvider + '/' + a.modelName : 'not known yet') +
    (a.modelHealth ? ' · ' + a.modelHealth : ''));
  const spaces = el('span');
  a.spaces.forEach((s, i) => {
    if (i) spaces.append(', ');
    spaces.append(link(s, '#/spaces/' + seg(a.namespace) + '/' + seg(s)));
  });
  fact('Spaces', spaces);
  const inbox = [a.waiting + ' waiting'];
  if (a.asking) {
    // Each call it asks about leads to its page, where it is answered.
    inbox.push(' · ' + a.asking + ' asking a person: ');
    (a.askingCalls || []).forEach((c, i) => {
      if (i) inbox.push(', ');
      inbox.push(link(c.tool, '#/calls/' + seg(c.callId), 'asking'));
    });
  }
  fact('Inbox', ...inbox);
  fact('Cycles', a.cycles + (a.lastCycleMs ? ' · last ' + when(a.lastCycleMs) : '') +
    (a.lastOutcome ? ' · the latest ' + a.lastOutcome : '') + ' · ',
    link('what each did', '#/agents/' + seg(a.namespace) + '/' + seg(a.name) + '/cycles', 'cycles-link'));
  fact('Tokens today', ...spend(a.tokensToday, a.tokensPerDay, 'today'));
  fact('This month', ...spend(a.tokensThisMonth, a.tokensPerMonth, 'month'));
  fact('Over its life', a.tokensUsed.toLocaleString() + ' tokens');
  page.push(facts);

  page.push(el('h3', 'Last cycles'));
  page.push(chart(a.checkpoints.slice().reverse()));

  page.push(el('h3', 'Tools'));
  page.push(table(['Tool', 'Source', 'Ready', 'Why not'], a.tools.map((t) =>
    [t.name, t.source, t.ready ? 'yes' : 'no', t.problem || '']), 'No tools reported yet.', 'tools'));

  page.push(el('h3', 'Checkpoints'));
  page.push(checkpoints(a, () => render(box, ns, name, current)));
  box.replaceChildren(...page);
}

/** `used` of `budget` as text and a meter. */
function spend(used, budget, id) {
  if (!budget) return [used.toLocaleString() + ' tokens (no budget)'];
  const meter = el('meter');
  meter.id = 'budget-' + id;
  meter.min = 0;
  meter.max = budget;
  meter.value = Math.min(used, budget);
  meter.high = budget * 0.8;
  meter.optimum = 0;
  return [meter, ' ' + used.toLocaleString() + ' of ' + budget.toLocaleString() + ' tokens'];
}

function table(heads, rows, none, cls) {
  if (rows.length === 0) return el('p', none, 'empty');
  const t = el('table', undefined, cls);
  const head = el('tr');
  for (const h of heads) head.append(el('th', h));
  t.append(head);
  for (const r of rows) {
    const tr = el('tr');
    for (const v of r) tr.append(el('td', v, 'text'));
    t.append(tr);
  }
  return t;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

/**
 * Tokens per cycle over time: one bar per retained checkpoint, placed at the time it was
 * written, as tall as the tokens its cycle used; the line is the consciousness's size.
 */
function chart(points) {
  if (points.length === 0) return el('p', 'No cycle yet.', 'empty');
  const W = 640, H = 180, L = 56, R = 12, T = 12, B = 34;
  const t0 = points[0].timeMs, t1 = points[points.length - 1].timeMs;
  const span = Math.max(t1 - t0, 1);
  const top = Math.max(1, ...points.map((p) => Math.max(p.tokensUsed, p.contextTokens)));
  const x = (t) => (points.length === 1 ? L + (W - L - R) / 2 : L + 12 + ((t - t0) / span) * (W - L - R - 24));
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const s = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'chart', role: 'img' });
  s.append(svg('title', {}, 'Tokens used by each of the last ' + points.length + ' cycles, over time'));
  s.append(svg('line', { x1: L, y1: y(0), x2: W - R, y2: y(0), class: 'axis' }));
  s.append(svg('text', { x: L - 6, y: y(top) + 4, 'text-anchor': 'end', class: 'label' }, top.toLocaleString()));
  s.append(svg('text', { x: L - 6, y: y(0), 'text-anchor': 'end', class: 'label' }, '0'));
  s.append(svg('text', { x: L, y: H - 8, class: 'label' }, when(t0)));
  if (points.length > 1) {
    s.append(svg('text', { x: W - R, y: H - 8, 'text-anchor': 'end', class: 'label' }, when(t1)));
  }
  const bar = Math.max(3, Math.min(18, (W - L - R) / points.length / 2));
  for (const p of points) {
    const r = svg('rect', {
      x: x(p.timeMs) - bar / 2, y: y(p.tokensUsed), width: bar,
      height: Math.max(0, y(0) - y(p.tokensUsed)), class: 'bar',
    });
    r.append(svg('title', {}, 'cycle ' + p.cycle + ': ' + p.tokensUsed + ' tokens used, ' +
      p.contextTokens + ' in its consciousness, ' + when(p.timeMs)));
    s.append(r);
  }
  s.append(svg('polyline', {
    points: points.map((p) => x(p.timeMs) + ',' + y(p.contextTokens)).join(' '), class: 'context',
  }));
  const legend = el('p', undefined, 'meta legend');
  legend.append(el('span', '■', 'swatch-bar'), ' tokens used by the cycle  ',
    el('span', '—', 'swatch-context'), ' tokens in its consciousness after it');
  const figure = el('figure', undefined, 'cycles');
  figure.append(s, legend);
  return figure;
}
