// What agents write, in the little Markdown models use: paragraphs, `- ` and `1. ` lists,
// ``` fenced code, `code`, **strong**, *emphasis* and [links](URL). Built as DOM nodes from
// text only — never HTML, so markup in a message stays text (and the page's Trusted Types
// policy forbids HTML anyway). A link goes only to http(s), opens apart, and sends no referrer.

import { el } from './dom.js';

/** `text` as Markdown: a `div` of blocks. */
export function markdown(text) {
  const root = el('div', undefined, 'md');
  const lines = String(text).split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.trimStart().startsWith('```')) {
      const code = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith('```')) code.push(lines[i++]);
      i += 1;
      const pre = el('pre');
      pre.append(el('code', code.join('\n')));
      root.append(pre);
      continue;
    }
    const item = /^\s*(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(line);
    if (item) {
      const ordered = item[2] !== undefined;
      const list = el(ordered ? 'ol' : 'ul');
      while (i < lines.length) {
        const m = /^\s*(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(lines[i]);
        if (!m || (m[2] !== undefined) !== ordered) break;
        const li = el('li');
        li.append(...inline(m[3]));
        list.append(li);
        i += 1;
      }
      root.append(list);
      continue;
    }
    if (line.trim() === '') {
      i += 1;
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() !== '' && !lines[i].trimStart().startsWith('```') &&
           !/^\s*(?:[-*+]|\d{1,9}[.)])\s+/.test(lines[i])) {
      para.push(lines[i++].replace(/^#{1,6}\s+/, ''));
    }
    const p = el('p');
    para.forEach((l, k) => {
      if (k) p.append(el('br'));
      p.append(...inline(l));
    });
    root.append(p);
  }
  return root;
}

const INLINE = /`([^`]+)`|\*\*([^*]+)\*\*|(?:^|(?<=\W))[*_]([^*_\s][^*_]*)[*_](?=\W|$)|\[([^\]]+)\]\(([^)\s]+)\)/g;

/** A line's inline spans, as nodes. */
function inline(text) {
  const out = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) out.push(document.createTextNode(text.slice(last, m.index)));
    last = m.index + m[0].length;
    if (m[1] !== undefined) out.push(el('code', m[1]));
    else if (m[2] !== undefined) out.push(el('strong', m[2]));
    else if (m[3] !== undefined) out.push(el('em', m[3]));
    else out.push(anchor(m[4], m[5]) || document.createTextNode(m[0]));
  }
  if (last < text.length) out.push(document.createTextNode(text.slice(last)));
  return out;
}

/** A link to `href` when it is http(s), else nothing. */
function anchor(text, href) {
  let url;
  try {
    url = new URL(href);
  } catch {
    return null;
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return null;
  const a = el('a', text);
  a.href = url.href;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  return a;
}
