// What an interactive tool's answer must be (its `resultSchema`, JSON Schema), in the browser:
// a form generated from the schema, and a check of the value before it is sent. The check is
// the gateway's (`check_arguments` in src/crd/validate.rs), read the same way and on the same
// keywords: `type` (one or a list), `properties`, `required`, `enum`, `minimum`/`maximum`,
// `minLength`/`maxLength`, `pattern`, `items`, `minItems`/`maxItems`, `additionalProperties`.
// The gateway checks again and its word counts; this one names what is wrong beside the answer
// before a round trip (a `pattern` is read by JavaScript's rules here, Rust's there).
import { el } from './dom.js';

const TYPES = {
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  integer: (v) => Number.isInteger(v),
  boolean: (v) => typeof v === 'boolean',
  object: (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
  array: (v) => Array.isArray(v),
  null: (v) => v === null,
};

/** JSON equality: objects by their members in any order, as JSON Schema compares. */
function same(a, b) {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((v, i) => same(v, b[i]));
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && same(a[k], b[k]));
}

/** What is wrong with `value` under `schema`: a list of `{path, message}`, empty when right. */
export function check(schema, value, path = '') {
  if (schema === true || schema === undefined || schema === null) return [];
  if (schema === false) return [{ path, message: 'is not allowed' }];
  const errors = [];
  const fail = (message) => errors.push({ path, message });
  const types = schema.type === undefined ? null : [].concat(schema.type);
  if (types && !types.some((t) => TYPES[t] && TYPES[t](value))) {
    fail('must be ' + types.map((t) => (t === 'integer' ? 'a whole number' : 'a ' + t)).join(' or '));
    return errors;
  }
  if (schema.enum && !schema.enum.some((e) => same(e, value))) {
    fail('must be one of ' + schema.enum.map((e) => JSON.stringify(e)).join(', '));
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) fail('must be at least ' + schema.minimum);
    if (schema.maximum !== undefined && value > schema.maximum) fail('must be at most ' + schema.maximum);
  }
  if (typeof value === 'string') {
    const length = [...value].length;
    if (schema.minLength !== undefined && length < schema.minLength) {
      fail('must be at least ' + schema.minLength + ' characters');
    }
    if (schema.maxLength !== undefined && length > schema.maxLength) {
      fail('must be at most ' + schema.maxLength + ' characters');
    }
    if (schema.pattern !== undefined) {
      let re = null;
      try { re = new RegExp(schema.pattern, 'u'); } catch (e) { /* the gateway judges it */ }
      if (re && !re.test(value)) fail('must match ' + schema.pattern);
    }
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) fail('must have at least ' + schema.minItems + ' items');
    if (schema.maxItems !== undefined && value.length > schema.maxItems) fail('must have at most ' + schema.maxItems + ' items');
    if (schema.items && typeof schema.items === 'object' && !Array.isArray(schema.items)) {
      value.forEach((v, i) => errors.push(...check(schema.items, v, path + '[' + i + ']')));
    }
  }
  if (TYPES.object(value)) {
    const props = schema.properties || {};
    for (const name of schema.required || []) {
      if (!Object.hasOwn(value, name)) errors.push({ path: join(path, name), message: 'is required' });
    }
    for (const [name, v] of Object.entries(value)) {
      if (Object.hasOwn(props, name)) errors.push(...check(props[name], v, join(path, name)));
      else if (schema.additionalProperties !== undefined) {
        errors.push(...check(schema.additionalProperties, v, join(path, name)));
      }
    }
  }
  return errors;
}

function join(path, name) {
  return path ? path + '.' + name : name;
}

/** The kind of input a property gets: a checkbox, a list, a number, a line, or JSON. */
function control(schema) {
  if (!schema || typeof schema !== 'object') return 'json';
  if (Array.isArray(schema.enum)) return 'choice';
  const type = schema.type;
  if (type === 'boolean') return 'boolean';
  if (type === 'integer' || type === 'number') return 'number';
  if (type === 'string') return 'string';
  return 'json';
}

/**
 * A form for `schema` in `container` (texts as text only). Returns a
 * function that reads the value the form says, or throws an Error naming the field whose text
 * is not a value (a number that is not one, JSON that does not parse).
 */
export function form(container, schema) {
  container.replaceChildren();
  const props = schema && schema.type === 'object' && schema.properties;
  // A field per property; a JSON answer when there are none, or when a required member has
  // no property to make a field of.
  const fieldless = props && (schema.required || []).some((n) => !Object.hasOwn(props, n));
  if (!props || Object.keys(props).length === 0 || fieldless) {
    const area = el('textarea', '', 'json');
    area.name = 'result';
    area.rows = 6;
    area.setAttribute('aria-label', 'Answer (JSON)');
    container.append(el('label', 'Answer (JSON)'), area);
    return () => parse(area.value, 'the answer');
  }
  const required = new Set(schema.required || []);
  const reads = [];
  // The required fields first, in the order the schema requires them (the gateway's JSON
  // keeps no order of properties), then the others.
  const rank = (name) => (required.has(name) ? schema.required.indexOf(name) : required.size);
  const names = Object.keys(props).sort((a, b) => rank(a) - rank(b));
  for (const [name, prop] of names.map((n) => [n, props[n]])) {
    const row = el('div', undefined, 'field');
    const id = 'field-' + name.replace(/[^A-Za-z0-9_-]/g, '_');
    const label = el('label', name + (required.has(name) ? ' *' : ''));
    label.htmlFor = id;
    row.append(label);
    const kind = control(prop);
    let input;
    if (kind === 'boolean') {
      input = el('input');
      input.type = 'checkbox';
      reads.push([name, () => input.checked]);
    } else if (kind === 'choice') {
      input = el('select');
      if (!required.has(name)) input.append(el('option', ''));
      prop.enum.forEach((v, i) => {
        const o = el('option', typeof v === 'string' ? v : JSON.stringify(v));
        o.value = String(i);
        input.append(o);
      });
      reads.push([name, () => (input.value === '' ? undefined : prop.enum[Number(input.value)])]);
    } else if (kind === 'number') {
      input = el('input');
      input.type = 'text';
      input.inputMode = prop.type === 'integer' ? 'numeric' : 'decimal';
      reads.push([name, () => {
        const t = input.value.trim();
        if (t === '') return undefined;
        const n = Number(t);
        if (!Number.isFinite(n)) throw new Error(name + ': "' + t + '" is not a number');
        return n;
      }]);
    } else if (kind === 'string') {
      input = el('input');
      input.type = 'text';
      reads.push([name, () => (input.value === '' && !required.has(name) ? undefined : input.value)]);
    } else {
      input = el('textarea', '', 'json');
      input.rows = 3;
      reads.push([name, () => (input.value.trim() === '' ? undefined : parse(input.value, name))]);
    }
    input.id = id;
    input.name = name;
    row.append(input);
    if (prop && prop.description) row.append(el('span', prop.description, 'meta text'));
    container.append(row);
  }
  return () => {
    const value = {};
    for (const [name, read] of reads) {
      const v = read();
      if (v !== undefined) value[name] = v;
    }
    return value;
  };
}

function parse(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(what + ' is not JSON: ' + e.message);
  }
}
