package agentlog

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/plumbhq/plumb/pkg/jsonquote"
)

// Level is the importance of a line; a Logger writes the lines at or above
// its own. The values are log/slog's.
type Level int8

// The levels, as log/slog numbers them.
const (
	LevelDebug Level = -4
	LevelInfo  Level = 0
	LevelWarn  Level = 4
	LevelError Level = 8
)

// String returns "DEBUG", "INFO", "WARN" or "ERROR"; a level between two
// of them is named as log/slog does, from the one below ("WARN+1",
// "DEBUG-2").
func (l Level) String() string {
	name, base := "DEBUG", LevelDebug
	switch {
	case l >= LevelError:
		name, base = "ERROR", LevelError
	case l >= LevelWarn:
		name, base = "WARN", LevelWarn
	case l >= LevelInfo:
		name, base = "INFO", LevelInfo
	}
	switch d := int(l) - int(base); {
	case d > 0:
		return name + "+" + strconv.Itoa(d)
	case d < 0:
		return name + strconv.Itoa(d)
	}
	return name
}

// ParseLevel returns the level named debug, info, warn or error, in any
// case.
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return LevelDebug, nil
	case "info":
		return LevelInfo, nil
	case "warn":
		return LevelWarn, nil
	case "error":
		return LevelError, nil
	}
	return 0, errors.New("unknown level " + strconv.Quote(s) + " (debug, info, warn, error)")
}

// Attr is a key and its value, written as one member of a line's object.
type Attr struct {
	key string
	str string // the value of a string
	num uint64 // the value of an integer (an int's two's complement)
	typ attrType
}

type attrType uint8

const (
	typeString attrType = iota
	typeInt
	typeUint64
)

// String returns an Attr whose value is the JSON string v.
func String(k, v string) Attr { return Attr{key: k, str: v, typ: typeString} }

// Int returns an Attr whose value is the JSON number v.
func Int(k string, v int) Attr { return Attr{key: k, num: uint64(v), typ: typeInt} }

// Uint64 returns an Attr whose value is the JSON number v.
func Uint64(k string, v uint64) Attr { return Attr{key: k, num: v, typ: typeUint64} }

// Err returns an Attr with key "error" whose value is err's message, or
// "<nil>" when err is nil.
func Err(err error) Attr {
	if err == nil {
		return String("error", "<nil>")
	}
	return String("error", err.Error())
}

// appendTo appends a as `,"key":value`.
func (a Attr) appendTo(b []byte) []byte {
	b = append(b, ',')
	b = jsonquote.Append(b, a.key)
	b = append(b, ':')
	switch a.typ {
	case typeInt:
		return strconv.AppendInt(b, int64(a.num), 10)
	case typeUint64:
		return strconv.AppendUint(b, a.num, 10)
	}
	return jsonquote.Append(b, a.str)
}

// Logger writes leveled lines to one io.Writer. It is safe for concurrent
// use. A nil *Logger, the zero Logger and Discard's write nothing.
type Logger struct {
	out   *output // nil: discard
	level Level
	attrs []byte // With's attrs, encoded; never appended to in place
}

// output is the writer that a Logger and the loggers made from it by With
// share, with the buffer a line is encoded in.
type output struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	now func() time.Time
}

// maxKeptBuf bounds the buffer an output keeps between lines, so one huge
// line does not pin its memory.
const maxKeptBuf = 16 << 10

// New returns a Logger that writes the lines at level and above to w, each
// line in one Write call, stamped in UTC. Write errors are ignored.
func New(w io.Writer, level Level) *Logger {
	// UTC: the local zone would be loaded from /etc/localtime for the
	// first line, which the agent writes while its box starts.
	return newLogger(w, level, func() time.Time { return time.Now().UTC() })
}

// newLogger is New with the clock lines are stamped by.
func newLogger(w io.Writer, level Level, now func() time.Time) *Logger {
	return &Logger{out: &output{w: w, now: now}, level: level}
}

// Discard returns a Logger that writes nothing; Enabled is false at every
// level.
func Discard() *Logger { return new(Logger) }

// With returns a Logger that writes attrs, after l's own, in every line.
// l is unchanged.
func (l *Logger) With(attrs ...Attr) *Logger {
	if l == nil || l.out == nil || len(attrs) == 0 {
		return l
	}
	c := *l
	c.attrs = l.attrs[:len(l.attrs):len(l.attrs)] // the first append copies
	for _, a := range attrs {
		c.attrs = a.appendTo(c.attrs)
	}
	return &c
}

// Enabled reports whether l writes lines at level.
func (l *Logger) Enabled(level Level) bool {
	return l != nil && l.out != nil && level >= l.level
}

// Debug writes a line at LevelDebug.
func (l *Logger) Debug(msg string, attrs ...Attr) { l.log(LevelDebug, msg, attrs) }

// Info writes a line at LevelInfo.
func (l *Logger) Info(msg string, attrs ...Attr) { l.log(LevelInfo, msg, attrs) }

// Warn writes a line at LevelWarn.
func (l *Logger) Warn(msg string, attrs ...Attr) { l.log(LevelWarn, msg, attrs) }

// Error writes a line at LevelError.
func (l *Logger) Error(msg string, attrs ...Attr) { l.log(LevelError, msg, attrs) }

// log writes one line, as slog's JSONHandler would: time, level, msg,
// With's attrs, then attrs.
func (l *Logger) log(level Level, msg string, attrs []Attr) {
	if !l.Enabled(level) {
		return
	}
	o := l.out
	o.mu.Lock()
	defer o.mu.Unlock()
	b := append(o.buf[:0], `{"time":"`...)
	b = o.now().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"`...)
	b = append(b, level.String()...)
	b = append(b, `","msg":`...)
	b = jsonquote.Append(b, msg)
	b = append(b, l.attrs...)
	for _, a := range attrs {
		b = a.appendTo(b)
	}
	b = append(b, "}\n"...)
	_, _ = o.w.Write(b)
	if cap(b) <= maxKeptBuf {
		o.buf = b
	}
}
