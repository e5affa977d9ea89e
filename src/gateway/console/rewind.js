// An agent's retained checkpoints (issue 43), each with two ways back to it: "Rewind to here"
// makes its consciousness what it was after that cycle (`POST …/consciousness/restore`,
// `update agents/consciousness`), once confirmed in a dialog; "Fork" shows the manifest of a
// new Agent seeded from it (`consciousness.seedFrom`), to apply with kubectl — the gateway
// creates no resources: whoever RBAC lets create Agents does, and the operator copies the
// checkpoint. The dialogs live outside the agent's page, which redraws every few seconds.
import { api, el, seg, when } from './dom.js';

/** The dialog `id`, made once. */
function dialog(id, label) {
  let d = document.getElementById(id);
  if (!d) {
    d = el('dialog', undefined, 'panel');
    d.id = id;
    d.setAttribute('aria-label', label);
    document.body.append(d);
  }
  return d;
}

// Another page closes them.
window.addEventListener('hashchange', () => {
  for (const d of document.querySelectorAll('dialog.panel[open]')) d.close();
});

function button(text, id, cls) {
  const b = el('button', text, cls);
  b.type = 'button';
  if (id) b.id = id;
  return b;
}

/** Agent `a`'s checkpoints, newest first, each with its rewind and fork; `refresh` redraws
 * the agent's page. */
export function checkpoints(a, refresh) {
  if (a.checkpoints.length === 0) return el('p', 'No cycle yet.', 'empty');
  const t = el('table', undefined, 'checkpoints');
  const head = el('tr');
  for (const h of ['Cycle', 'When', 'Tokens used', 'Context tokens', 'Messages', '']) head.append(el('th', h));
  t.append(head);
  for (const c of a.checkpoints) {
    const tr = el('tr');
    tr.dataset.cycle = c.cycle;
    for (const v of [c.cycle, c.timeMs ? when(c.timeMs) : '—', c.tokensUsed, c.contextTokens, c.messages]) {
      tr.append(el('td', v, 'text'));
    }
    const rewind = button('Rewind to here', null, 'rewind');
    rewind.addEventListener('click', () => confirmRewind(a, c, refresh));
    const fork = button('Fork', null, 'fork');
    fork.addEventListener('click', () => showFork(a, c));
    const td = el('td', undefined, 'actions');
    td.append(rewind, ' ', fork);
    tr.append(td);
    t.append(tr);
  }
  return t;
}

function confirmRewind(a, c, refresh) {
  const who = a.namespace + '/' + a.name;
  const d = dialog('rewind-dialog', 'Rewind');
  d.dataset.cycle = c.cycle;
  const outcome = el('p', '', 'outcome');
  outcome.setAttribute('role', 'status');
  const go = button('Rewind', 'rewind-confirm', 'danger');
  const cancel = button('Cancel', 'rewind-cancel');
  const buttons = el('div', undefined, 'buttons');
  buttons.append(go, cancel);
  cancel.addEventListener('click', () => d.close());
  go.addEventListener('click', async () => {
    go.disabled = cancel.disabled = true;
    outcome.textContent = 'Rewinding…';
    outcome.classList.remove('error');
    try {
      const done = await api('/v1/agents/' + seg(a.namespace) + '/' + seg(a.name) + '/consciousness/restore',
        { cycle: c.cycle });
      outcome.textContent = 'Rewound: ' + who + ' is as it was after cycle ' + done.cycle + ' (' +
        done.messages + ' messages, ' + done.tokens.toLocaleString() + ' tokens in its consciousness).';
      d.dataset.done = done.cycle;
      const close = button('Close', 'rewind-close');
      close.addEventListener('click', () => d.close());
      buttons.replaceChildren(close);
      close.focus();
      Promise.resolve(refresh()).catch(() => {});
    } catch (e) {
      outcome.textContent = {
        409: 'Not now: it is thinking; try once it sleeps.',
        403: 'You may not rewind this agent (RBAC: update agents/consciousness). ' + e.message,
        404: 'Not rewound: ' + e.message,
      }[e.status] || 'Not rewound: ' + e.message;
      outcome.classList.add('error');
      go.disabled = cancel.disabled = false;
    }
  });
  delete d.dataset.done;
  d.replaceChildren(
    el('h3', 'Rewind ' + who + ' to cycle ' + c.cycle + '?', 'text'),
    el('p', 'Its consciousness becomes what it was after cycle ' + c.cycle +
      (c.timeMs ? ' (' + when(c.timeMs) + ')' : '') + ': ' + c.messages + ' messages. ' +
      'What it took in after that cycle is forgotten; what it said stays in its spaces.', 'text'),
    el('p', 'It is done only while the agent sleeps, by whom RBAC lets update agents/consciousness.', 'meta'),
    outcome, buttons);
  if (!d.open) d.showModal();
  cancel.focus();
}

/** A name Kubernetes takes for an Agent. */
const NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

/** `s` as a YAML scalar: plain when it is safe so, else quoted (JSON's quoting is YAML's). */
function scalar(s) {
  return /^[A-Za-z0-9][A-Za-z0-9._/-]*$/.test(s) ? s : JSON.stringify(s);
}

/** The manifest of agent `name`, a fork of `a` from checkpoint `c`. */
export function forkYaml(a, c, name) {
  const lines = [
    'apiVersion: agentfleet.dev/v1alpha1',
    'kind: Agent',
    'metadata:',
    '  name: ' + scalar(name),
    '  namespace: ' + scalar(a.namespace),
    'spec:',
    '  # The rest as ' + a.name + "'s manifest says (instructions, tools, budgets, model settings):",
    '  # kubectl get agent ' + a.name + ' -n ' + a.namespace + ' -o yaml',
  ];
  if (a.modelProvider) {
    lines.push('  model:', '    provider: ' + scalar(a.modelProvider), '    name: ' + scalar(a.modelName));
  }
  if (a.spaces.length) lines.push('  spaces: [' + a.spaces.map(scalar).join(', ') + ']');
  lines.push('  consciousness:', '    seedFrom:', '      agent: ' + scalar(a.name), '      cycle: ' + c.cycle);
  return lines.join('\n') + '\n';
}

function showFork(a, c) {
  const d = dialog('fork-dialog', 'Fork');
  d.dataset.cycle = c.cycle;
  const name = el('input');
  name.id = 'fork-name';
  name.type = 'text';
  name.spellcheck = false;
  name.autocomplete = 'off';
  name.value = (a.name + '-fork').slice(0, 63);
  const label = el('label', 'Name of the new agent ');
  label.htmlFor = 'fork-name';
  const wrong = el('span', '', 'error');
  wrong.id = 'fork-name-error';
  const yaml = el('textarea', undefined, 'yaml');
  yaml.id = 'fork-yaml';
  yaml.readOnly = true;
  yaml.rows = 17;
  yaml.wrap = 'off';
  yaml.spellcheck = false;
  yaml.setAttribute('aria-label', 'The new Agent’s manifest');
  const write = () => {
    const n = name.value.trim();
    wrong.textContent = NAME.test(n) && n.length <= 63 ? ''
      : 'Not a name Kubernetes takes: lowercase letters, digits and dashes, at most 63.';
    yaml.value = forkYaml(a, c, n);
  };
  name.addEventListener('input', write);
  write();
  const copied = el('span', '', 'meta');
  copied.setAttribute('role', 'status');
  const copy = button('Copy', 'fork-copy');
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(yaml.value);
      copied.textContent = 'Copied.';
    } catch (e) {
      yaml.focus();
      yaml.select();
      copied.textContent = 'Selected: copy it with Ctrl-C (this page may not write the clipboard).';
    }
  });
  const close = button('Close', 'fork-close');
  close.addEventListener('click', () => d.close());
  const buttons = el('div', undefined, 'buttons');
  buttons.append(copy, ' ', copied, close);
  const field = el('p');
  field.append(label, name, ' ', wrong);
  d.replaceChildren(
    el('h3', 'Fork ' + a.namespace + '/' + a.name + ' from cycle ' + c.cycle, 'text'),
    el('p', 'A new Agent that starts from this checkpoint: what ' + a.name +
      ' was after cycle ' + c.cycle + ', going on apart from it.', 'text'),
    field, yaml,
    el('p', 'Apply it with kubectl apply -f: creating an Agent is for whoever RBAC lets create ' +
      'Agents, and the operator copies the checkpoint (seedFrom).', 'meta apply'),
    buttons);
  if (!d.open) d.showModal();
  name.focus();
  name.select();
}
