// A small JSON Schema check for edited tool arguments: type, required,
// properties, additionalProperties: false, enum, items, minimum/maximum,
// minLength/maxLength. The server validates again with the full
// validator (pkg/agent/jsonschema); this only catches mistakes early.
export function validate(schema, value, path = '$') {
  const out = [];
  check(schema || {}, value, path, out);
  return out;
}

function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'array';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

function matches(want, got) {
  return want === got || (want === 'number' && got === 'integer');
}

function check(s, v, path, out) {
  if (typeof s !== 'object' || s === null) return;
  const got = typeOf(v);
  if (s.type) {
    const types = Array.isArray(s.type) ? s.type : [s.type];
    if (!types.some((t) => matches(t, got))) {
      out.push(path + ': want ' + types.join(' or ') + ', got ' + got);
      return;
    }
  }
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) {
    out.push(path + ': want one of ' + s.enum.map((e) => JSON.stringify(e)).join(', '));
  }
  if (got === 'string') {
    if (s.minLength !== undefined && v.length < s.minLength) out.push(path + ': shorter than ' + s.minLength);
    if (s.maxLength !== undefined && v.length > s.maxLength) out.push(path + ': longer than ' + s.maxLength);
  }
  if (got === 'integer' || got === 'number') {
    if (s.minimum !== undefined && v < s.minimum) out.push(path + ': less than ' + s.minimum);
    if (s.maximum !== undefined && v > s.maximum) out.push(path + ': more than ' + s.maximum);
  }
  if (got === 'object') {
    for (const r of s.required || []) {
      if (!(r in v)) out.push(path + '.' + r + ': required');
    }
    const props = s.properties || {};
    for (const [k, x] of Object.entries(v)) {
      if (k in props) check(props[k], x, path + '.' + k, out);
      else if (s.additionalProperties === false) out.push(path + '.' + k + ': not allowed');
      else if (typeof s.additionalProperties === 'object') check(s.additionalProperties, x, path + '.' + k, out);
    }
  }
  if (got === 'array' && s.items) {
    v.forEach((x, i) => check(s.items, x, path + '[' + i + ']', out));
  }
}
