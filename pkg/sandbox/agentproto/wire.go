package agentproto

import (
	"encoding/base64"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/plumbhq/plumb/pkg/jsonquote"
)

// The frames' JSON codec. The wire is plain JSON, which sandboxd also
// reads and writes with encoding/json; the agent uses this codec instead
// because encoding/json (and log/slog, which imports it) is about a
// seventh of the static agent binary, and the binary's pages count in
// every box's memory (docs/benchmarks.md, B9). It covers what the
// protocol's types use: structs with `json:"name,omitempty"` tags and
// embedded structs, strings, bools, integers, pointers, slices ([]byte as
// standard base64), map[string]string and RawMessage. Anything else (a
// float, an interface holding something else, a custom marshaller) is an
// error, never a silent difference from encoding/json.

// RawMessage is an encoded JSON value kept as it is: a Request's Args and a
// Response's Result.
type RawMessage []byte

// MarshalJSON returns m, or null when m is empty, so that encoding/json
// writes a RawMessage as it is, as it writes its own json.RawMessage.
func (m RawMessage) MarshalJSON() ([]byte, error) {
	if len(m) == 0 {
		return []byte("null"), nil
	}
	return m, nil
}

// UnmarshalJSON keeps a copy of data, so that encoding/json reads a
// RawMessage as it is.
func (m *RawMessage) UnmarshalJSON(data []byte) error {
	*m = append((*m)[:0], data...)
	return nil
}

// Marshal encodes v as JSON as encoding/json would for the supported
// types (it does not escape <, > and &, which JSON does not require).
func Marshal(v any) ([]byte, error) {
	return appendValue(make([]byte, 0, 128), reflect.ValueOf(v))
}

// Unmarshal decodes the JSON value data into v, a non-nil pointer,
// strictly: a field v does not have, or anything after the value, is an
// error. Field names match exactly, else case-insensitively, as
// encoding/json matches them.
func Unmarshal(data []byte, v any) error {
	return unmarshal(data, v, false, false)
}

// UnmarshalResult decodes an agent's result into v, a non-nil pointer, as
// encoding/json.Unmarshal does: like Unmarshal, but a member v has no
// field for is skipped, so that a worker reads the results of an agent
// newer than itself. sandboxd decodes the agent's results with it, in
// about a third of encoding/json's time for a listing: a cost on every
// call's path (docs/benchmarks.md, B1).
func UnmarshalResult(data []byte, v any) error {
	return unmarshal(data, v, true, false)
}

// PeekID returns the "id" of a frame that failed strict decoding, so that
// its sender still gets an answer; 0 when there is none. Only the first
// JSON value counts and unknown fields are skipped.
func PeekID(frame []byte) uint64 {
	var v struct {
		ID uint64 `json:"id"`
	}
	if unmarshal(frame, &v, true, true) != nil {
		return 0
	}
	return v.ID
}

// unmarshal decodes the first JSON value of data into v; skipUnknown
// skips members v has no field for (else they are refused), and tail
// allows anything after the value.
func unmarshal(data []byte, v any, skipUnknown, tail bool) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("json: decode into a nil or non-pointer value")
	}
	d := &decoder{data: data, skipUnknown: skipUnknown}
	if err := d.value(rv.Elem()); err != nil {
		return err
	}
	d.space()
	if !tail && d.pos < len(d.data) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

var rawType = reflect.TypeFor[RawMessage]()

// field is one JSON member of a struct type.
type field struct {
	name      string
	index     []int
	omitEmpty bool
}

// fieldsCache holds each struct type's fields (reflect.Type → []field).
var fieldsCache sync.Map

// fieldsOf lists t's JSON members in order: exported fields by tag name
// (or Go name), "-" skipped, untagged embedded structs flattened (a name
// at a shallower depth wins).
func fieldsOf(t reflect.Type) []field {
	if f, ok := fieldsCache.Load(t); ok {
		return f.([]field)
	}
	var out []field
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(index), i)
			if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
				walk(sf.Type, idx)
				continue
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if j := slices.IndexFunc(out, func(f field) bool { return f.name == name }); j >= 0 {
				if len(out[j].index) <= len(idx) {
					continue
				}
				out = slices.Delete(out, j, j+1)
			}
			out = append(out, field{name: name, index: idx, omitEmpty: opts == "omitempty"})
		}
	}
	walk(t, nil)
	f, _ := fieldsCache.LoadOrStore(t, out)
	return f.([]field)
}

func unsupported(t reflect.Type) error {
	return errors.New("json: unsupported type " + t.String())
}

func appendValue(b []byte, v reflect.Value) ([]byte, error) {
	if !v.IsValid() {
		return append(b, "null"...), nil
	}
	if v.Type() == rawType {
		if v.Len() == 0 {
			return append(b, "null"...), nil
		}
		return append(b, v.Bytes()...), nil
	}
	switch v.Kind() {
	case reflect.Bool:
		return strconv.AppendBool(b, v.Bool()), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.AppendInt(b, v.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.AppendUint(b, v.Uint(), 10), nil
	case reflect.String:
		return jsonquote.Append(b, v.String()), nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		return appendValue(b, v.Elem())
	case reflect.Slice:
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, v.Bytes())
			return append(b, '"'), nil
		}
		b = append(b, '[')
		for i := range v.Len() {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, v.Index(i)); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return nil, unsupported(v.Type())
		}
		if v.IsNil() {
			return append(b, "null"...), nil
		}
		keys := make([]string, 0, v.Len())
		for it := v.MapRange(); it.Next(); {
			keys = append(keys, it.Key().String())
		}
		slices.Sort(keys)
		key := reflect.New(v.Type().Key()).Elem()
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(jsonquote.Append(b, k), ':')
			key.SetString(k)
			var err error
			if b, err = appendValue(b, v.MapIndex(key)); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case reflect.Struct:
		b = append(b, '{')
		first := true
		for _, f := range fieldsOf(v.Type()) {
			fv := v.FieldByIndex(f.index)
			if f.omitEmpty && isEmpty(fv) {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(jsonquote.Append(b, f.name), ':')
			var err error
			if b, err = appendValue(b, fv); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, unsupported(v.Type())
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.String, reflect.Slice, reflect.Map, reflect.Array:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return v.Uint() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// maxDepth bounds the nesting of a value skipped or kept raw, as
// encoding/json bounds it.
const maxDepth = 10000

// decoder reads one JSON value from data at pos.
type decoder struct {
	data        []byte
	pos         int
	skipUnknown bool // a member with no field is skipped, not refused
}

func (d *decoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) syntax(what string) error {
	return errors.New("json: " + what + " at offset " + strconv.Itoa(d.pos))
}

// peek returns the next non-space byte (0 at the end).
func (d *decoder) peek() byte {
	d.space()
	if d.pos >= len(d.data) {
		return 0
	}
	return d.data[d.pos]
}

// literal consumes the literal lit (true, false, null).
func (d *decoder) literal(lit string) error {
	if string(d.data[d.pos:min(d.pos+len(lit), len(d.data))]) != lit { // no allocation
		return d.syntax("invalid literal")
	}
	d.pos += len(lit)
	return nil
}

func mismatch(what string, t reflect.Type) error {
	return errors.New("json: cannot decode " + what + " into a value of type " + t.String())
}

// value decodes the next value into v.
func (d *decoder) value(v reflect.Value) error {
	c := d.peek()
	if v.Type() == rawType {
		start := d.pos
		if err := d.skip(); err != nil {
			return err
		}
		v.SetBytes(slices.Clone(d.data[start:d.pos]))
		return nil
	}
	if c == 'n' {
		if err := d.literal("null"); err != nil {
			return err
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			v.SetZero()
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.value(v.Elem())
	case reflect.Bool:
		switch c {
		case 't':
			v.SetBool(true)
			return d.literal("true")
		case 'f':
			v.SetBool(false)
			return d.literal("false")
		}
		return mismatch("a "+tokenName(c), v.Type())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lit, err := d.integer(c, v.Type())
		if err != nil {
			return err
		}
		if v.CanInt() {
			n, ok := parseInt(lit, v.Type().Bits())
			if !ok {
				return mismatch("number "+string(lit), v.Type())
			}
			v.SetInt(n)
			return nil
		}
		n, ok := parseUint(lit, v.Type().Bits())
		if !ok {
			return mismatch("number "+string(lit), v.Type())
		}
		v.SetUint(n)
		return nil
	case reflect.String:
		if c != '"' {
			return mismatch("a "+tokenName(c), v.Type())
		}
		s, err := d.str()
		if err != nil {
			return err
		}
		v.SetString(s)
		return nil
	case reflect.Slice:
		return d.slice(c, v)
	case reflect.Map:
		return d.mapValue(c, v)
	case reflect.Struct:
		return d.object(c, v)
	}
	return unsupported(v.Type())
}

func tokenName(c byte) string {
	switch {
	case c == '"':
		return "string"
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == 't' || c == 'f':
		return "bool"
	case c == '-' || c >= '0' && c <= '9':
		return "number"
	case c == 0:
		return "end of input"
	}
	return "invalid character " + strconv.QuoteRune(rune(c))
}

// integer consumes a number and returns its literal, which must be an
// integer for a value of type t.
func (d *decoder) integer(c byte, t reflect.Type) ([]byte, error) {
	if c != '-' && (c < '0' || c > '9') {
		return nil, mismatch("a "+tokenName(c), t)
	}
	start := d.pos
	isInt, err := d.number()
	if err != nil {
		return nil, err
	}
	lit := d.data[start:d.pos]
	if !isInt {
		return nil, mismatch("number "+string(lit), t)
	}
	return lit, nil
}

// parseUint is strconv.ParseUint(lit, 10, bits) for the digits of an
// integer literal (number checked its syntax) without making it a string:
// ok is false when it does not fit.
func parseUint(lit []byte, bits int) (n uint64, ok bool) {
	if len(lit) == 0 || lit[0] < '0' || lit[0] > '9' {
		return 0, false // strconv.ParseUint takes no sign
	}
	limit := uint64(1)<<bits - 1
	if bits == 64 {
		limit = ^uint64(0)
	}
	for _, c := range lit {
		dg := uint64(c - '0')
		if n > (limit-dg)/10 {
			return 0, false
		}
		n = n*10 + dg
	}
	return n, true
}

// parseInt is strconv.ParseInt(lit, 10, bits) for an integer literal,
// as parseUint.
func parseInt(lit []byte, bits int) (int64, bool) {
	neg := len(lit) > 0 && lit[0] == '-'
	digits := lit
	if neg {
		digits = lit[1:]
	}
	limit := uint64(1) << (bits - 1) // |min|; max is limit-1
	u, ok := parseUint(digits, 64)
	switch {
	case !ok, neg && u > limit, !neg && u >= limit:
		return 0, false
	case neg:
		return -int64(u-1) - 1, true
	}
	return int64(u), true
}

// number consumes a JSON number; isInt is false when it has a fraction
// or an exponent.
func (d *decoder) number() (isInt bool, err error) {
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		d.pos++
	}
	switch {
	case d.pos < len(d.data) && d.data[d.pos] == '0':
		d.pos++
	case digits() == 0:
		return false, d.syntax("invalid number")
	}
	isInt = true
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		isInt = false
		if digits() == 0 {
			return false, d.syntax("invalid number")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		isInt = false
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return false, d.syntax("invalid number")
		}
	}
	return isInt, nil
}

// str consumes a string (at its opening quote) and returns its value:
// escapes decoded, invalid UTF-8 and lone surrogates as U+FFFD.
func (d *decoder) str() (string, error) {
	b, err := d.strBytes()
	return string(b), err
}

// strBytes is str's value as bytes: a slice of the input when the string
// has nothing to decode (no allocation), else a new buffer.
func (d *decoder) strBytes() ([]byte, error) {
	d.pos++ // the opening quote
	start := d.pos
	// Fast path: nothing to decode.
	for i := start; i < len(d.data); i++ {
		c := d.data[i]
		if c == '"' {
			d.pos = i + 1
			return d.data[start:i], nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
	}
	// The decoded string is at most as long as its encoding (but for
	// invalid UTF-8, each byte of which becomes three): size it once.
	end := start
	for end < len(d.data) && d.data[end] != '"' {
		if d.data[end] == '\\' {
			end++
		}
		end++
	}
	b := make([]byte, 0, end-start)
	i := start
	for {
		if i >= len(d.data) {
			d.pos = i
			return nil, d.syntax("unterminated string")
		}
		c := d.data[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return b, nil
		case c < 0x20:
			d.pos = i
			return nil, d.syntax("control character in string")
		case c == '\\':
			if i+1 >= len(d.data) {
				d.pos = i
				return nil, d.syntax("unterminated string")
			}
			e := d.data[i+1]
			i += 2
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := hex4(d.data[i:])
				if !ok {
					d.pos = i
					return nil, d.syntax("invalid \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2, ok := rune(-1), false
					if i+1 < len(d.data) && d.data[i] == '\\' && d.data[i+1] == 'u' {
						r2, ok = hex4(d.data[i+2:])
					}
					if dec := utf16.DecodeRune(r, r2); ok && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default:
				d.pos = i - 1
				return nil, d.syntax("invalid escape")
			}
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRune(d.data[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, d.data[i:i+size]...)
			}
			i += size
		}
	}
}

func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// member starts an object's next member, at its opening brace (first)
// or after the previous member's value: it returns the member's name, or
// done at the closing brace. The caller must consume the member's value.
func (d *decoder) member(first bool) (name []byte, done bool, err error) {
	if first {
		d.pos++ // {
		if d.peek() == '}' {
			d.pos++
			return nil, true, nil
		}
	} else {
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil, true, nil
		default:
			return nil, false, d.syntax("expected ',' or '}'")
		}
	}
	name, err = d.memberName()
	return name, false, err
}

func (d *decoder) object(c byte, v reflect.Value) error {
	if c != '{' {
		return mismatch("a "+tokenName(c), v.Type())
	}
	fields := fieldsOf(v.Type())
	for first := true; ; first = false {
		name, done, err := d.member(first)
		if err != nil || done {
			return err
		}
		i := slices.IndexFunc(fields, func(f field) bool { return f.name == string(name) })
		if i < 0 {
			i = slices.IndexFunc(fields, func(f field) bool { return strings.EqualFold(f.name, string(name)) })
		}
		if i < 0 {
			if !d.skipUnknown {
				return errors.New("json: unknown field " + strconv.Quote(string(name)))
			}
			err = d.skip()
		} else {
			err = d.value(v.FieldByIndex(fields[i].index))
		}
		if err != nil {
			return err
		}
	}
}

func (d *decoder) mapValue(c byte, v reflect.Value) error {
	if v.Type().Key().Kind() != reflect.String {
		return unsupported(v.Type())
	}
	if c != '{' {
		return mismatch("a "+tokenName(c), v.Type())
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(v.Type()))
	}
	for first := true; ; first = false {
		name, done, err := d.member(first)
		if err != nil || done {
			return err
		}
		e := reflect.New(v.Type().Elem()).Elem()
		if err := d.value(e); err != nil {
			return err
		}
		k := reflect.New(v.Type().Key()).Elem()
		k.SetString(string(name))
		v.SetMapIndex(k, e)
	}
}

func (d *decoder) slice(c byte, v reflect.Value) error {
	if v.Type().Elem().Kind() == reflect.Uint8 {
		if c != '"' {
			return mismatch("a "+tokenName(c), v.Type())
		}
		s, err := d.str()
		if err != nil {
			return err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return errors.New("json: invalid base64 for " + v.Type().String())
		}
		v.SetBytes(b)
		return nil
	}
	if c != '[' {
		return mismatch("a "+tokenName(c), v.Type())
	}
	d.pos++
	v.SetLen(0)
	if d.peek() == ']' {
		d.pos++
		if v.IsNil() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		}
		return nil
	}
	for {
		// Decode in place: grow by one zeroed element.
		n := v.Len()
		if n == v.Cap() {
			v.Grow(1)
		}
		v.SetLen(n + 1)
		e := v.Index(n)
		e.SetZero()
		if err := d.value(e); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return nil
		default:
			return d.syntax("expected ',' or ']'")
		}
	}
}

// skip consumes one value of any kind, checking its syntax, without
// recursion (nesting is bounded by maxDepth).
func (d *decoder) skip() error {
	var stack []byte // the open brackets
	for {
		c := d.peek()
		switch {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return d.syntax("nesting too deep")
			}
			stack = append(stack, c)
			d.pos++
			if d.peek() == c+2 { // } or ]
				d.pos++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' {
				if _, err := d.memberName(); err != nil {
					return err
				}
			}
			continue
		case c == '"':
			if _, err := d.strBytes(); err != nil {
				return err
			}
		case c == 't':
			if err := d.literal("true"); err != nil {
				return err
			}
		case c == 'f':
			if err := d.literal("false"); err != nil {
				return err
			}
		case c == 'n':
			if err := d.literal("null"); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			if _, err := d.number(); err != nil {
				return err
			}
		default:
			return d.syntax("unexpected " + tokenName(c))
		}
		// After a value: close brackets, or go on to the next element.
		for {
			if len(stack) == 0 {
				return nil
			}
			open := stack[len(stack)-1]
			switch d.peek() {
			case ',':
				d.pos++
				if open == '{' {
					if _, err := d.memberName(); err != nil {
						return err
					}
				}
			case open + 2:
				d.pos++
				stack = stack[:len(stack)-1]
				continue
			default:
				return d.syntax("expected ',' or a closing bracket")
			}
			break
		}
	}
}

// memberName consumes an object member's `"name":` and returns the name
// (see strBytes: it may be a slice of the input).
func (d *decoder) memberName() ([]byte, error) {
	if d.peek() != '"' {
		return nil, d.syntax("expected a member name")
	}
	name, err := d.strBytes()
	if err != nil {
		return nil, err
	}
	if d.peek() != ':' {
		return nil, d.syntax("expected ':'")
	}
	d.pos++
	return name, nil
}
