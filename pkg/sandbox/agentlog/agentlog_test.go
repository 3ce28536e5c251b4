package agentlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is the fixed time of the tests' lines.
var clock = time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("", 3600))

const stamp = `{"time":"2025-01-02T03:04:05.000000006+01:00"`

// testLogger returns a Logger at level writing to a buffer, with the fixed
// clock.
func testLogger(level Level) (*Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return newLogger(&buf, level, func() time.Time { return clock }), &buf
}

func TestLevelString(t *testing.T) {
	for _, tt := range []struct {
		l    Level
		want string
	}{
		{LevelDebug, "DEBUG"},
		{LevelInfo, "INFO"},
		{LevelWarn, "WARN"},
		{LevelError, "ERROR"},
		{LevelDebug - 2, "DEBUG-2"},
		{LevelInfo - 1, "DEBUG+3"},
		{LevelWarn + 1, "WARN+1"},
		{math.MaxInt8, "ERROR+119"},
		{math.MinInt8, "DEBUG-124"},
	} {
		if got, want := tt.l.String(), slog.Level(tt.l).String(); got != tt.want || got != want {
			t.Errorf("Level(%d).String() = %q, want %q (slog %q)", tt.l, got, tt.want, want)
		}
	}
}

func TestParseLevel(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Level
		err  string
	}{
		{in: "debug", want: LevelDebug},
		{in: "info", want: LevelInfo},
		{in: "WARN", want: LevelWarn},
		{in: "Error", want: LevelError},
		{in: "warning", err: `unknown level "warning" (debug, info, warn, error)`},
		{in: "info+2", err: `unknown level "info+2" (debug, info, warn, error)`},
		{in: " info", err: `unknown level " info" (debug, info, warn, error)`},
		{in: "", err: `unknown level "" (debug, info, warn, error)`},
	} {
		got, err := ParseLevel(tt.in)
		switch {
		case tt.err != "" && (err == nil || err.Error() != tt.err):
			t.Errorf("ParseLevel(%q) error = %v, want %s", tt.in, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestLines(t *testing.T) {
	for _, tt := range []struct {
		name string
		log  func(*Logger)
		want string
	}{
		{
			name: "message only",
			log:  func(l *Logger) { l.Info("ready") },
			want: stamp + `,"level":"INFO","msg":"ready"}`,
		},
		{
			name: "every kind of attr",
			log: func(l *Logger) {
				l.Warn("write response", Uint64("request-id", math.MaxUint64), Int("pgid", -3), String("op", "execute"), Err(errors.New("broken pipe")))
			},
			want: stamp + `,"level":"WARN","msg":"write response","request-id":18446744073709551615,"pgid":-3,"op":"execute","error":"broken pipe"}`,
		},
		{
			name: "nil error",
			log:  func(l *Logger) { l.Error("x", Err(nil)) },
			want: stamp + `,"level":"ERROR","msg":"x","error":"<nil>"}`,
		},
		{
			name: "With's attrs come first",
			log: func(l *Logger) {
				l.With(String("logger", "sandbox-agent")).With(Int("pgid", 7)).Debug("request", String("op", "ls"))
			},
			want: stamp + `,"level":"DEBUG","msg":"request","logger":"sandbox-agent","pgid":7,"op":"ls"}`,
		},
		{
			name: "escaped keys and values",
			log:  func(l *Logger) { l.Info("a\"b", String("k\n", "<&>")) },
			want: stamp + `,"level":"INFO","msg":"a\"b","k\n":"<&>"}`,
		},
		{
			name: "duplicate keys are kept",
			log:  func(l *Logger) { l.With(Int("n", 1)).Info("m", Int("n", 2)) },
			want: stamp + `,"level":"INFO","msg":"m","n":1,"n":2}`,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, buf := testLogger(LevelDebug)
			tt.log(l)
			if got := buf.String(); got != tt.want+"\n" {
				t.Fatalf("line\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestLevels(t *testing.T) {
	methods := []struct {
		level Level
		log   func(*Logger, string, ...Attr)
	}{
		{LevelDebug, (*Logger).Debug},
		{LevelInfo, (*Logger).Info},
		{LevelWarn, (*Logger).Warn},
		{LevelError, (*Logger).Error},
	}
	for _, at := range []Level{LevelDebug, LevelInfo, LevelWarn, LevelError, LevelError + 1} {
		for _, m := range methods {
			l, buf := testLogger(at)
			m.log(l, "m")
			want := m.level >= at
			if got := buf.Len() > 0; got != want || l.Enabled(m.level) != want {
				t.Errorf("logger at %v, line at %v: written %v, Enabled %v; want %v", at, m.level, got, l.Enabled(m.level), want)
			}
			if want && !strings.Contains(buf.String(), `"level":"`+m.level.String()+`"`) {
				t.Errorf("logger at %v, line at %v: %s", at, m.level, buf.String())
			}
		}
	}
}

func TestWithLeavesParent(t *testing.T) {
	l, buf := testLogger(LevelInfo)
	parent := l.With(String("a", "1"))
	// Siblings made from one parent must not share the parent's spare
	// capacity: each would overwrite the other's attrs.
	b := parent.With(String("b", "2"))
	c := parent.With(String("c", "3"))
	if l.With() != l {
		t.Error("With() made a new Logger")
	}
	for _, tt := range []struct {
		l    *Logger
		want string
	}{
		{l, ""},
		{parent, `,"a":"1"`},
		{b, `,"a":"1","b":"2"`},
		{c, `,"a":"1","c":"3"`},
	} {
		buf.Reset()
		tt.l.Info("m")
		if want := stamp + `,"level":"INFO","msg":"m"` + tt.want + "}\n"; buf.String() != want {
			t.Errorf("line %s, want %s", buf.String(), want)
		}
	}
}

func TestDiscard(t *testing.T) {
	for _, tt := range []struct {
		name string
		l    *Logger
	}{
		{"Discard", Discard()},
		{"nil", nil},
		{"zero", &Logger{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range []*Logger{tt.l, tt.l.With(String("k", "v"))} {
				if l.Enabled(LevelError) {
					t.Error("Enabled(LevelError) = true")
				}
				// Nothing to write to: these must only not panic.
				l.Debug("m")
				l.Info("m")
				l.Warn("m", Int("n", 1))
				l.Error("m", Err(io.EOF))
			}
		})
	}
}

// writes records each Write call.
type writes struct{ calls []string }

func (w *writes) Write(p []byte) (int, error) {
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func TestOneWritePerLine(t *testing.T) {
	var w writes
	l := newLogger(&w, LevelInfo, func() time.Time { return clock }).With(String("logger", "x"))
	l.Info("one", Int("n", 1))
	l.Warn("two\nlines")
	l.Debug("filtered")
	if len(w.calls) != 2 {
		t.Fatalf("%d Write calls, want 2: %q", len(w.calls), w.calls)
	}
	for _, c := range w.calls {
		if strings.Count(c, "\n") != 1 || !strings.HasSuffix(c, "}\n") {
			t.Errorf("Write(%q): not one whole line", c)
		}
	}
}

// TestConcurrent logs from many goroutines through a Logger and loggers
// made from it by With, onto a writer that is not safe for concurrent use
// (-race finds unlocked writes), and checks every line arrives whole.
func TestConcurrent(t *testing.T) {
	const goroutines, lines = 8, 200
	l, buf := testLogger(LevelDebug)
	var wg sync.WaitGroup
	for g := range goroutines {
		lg := l
		if g%2 == 1 {
			lg = l.With(Int("g", g))
		}
		wg.Go(func() {
			for i := range lines {
				lg.With(Int("i", i)).Info("line", String("s", strings.Repeat("x", i)))
			}
		})
	}
	wg.Wait()
	got := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(got) != goroutines*lines {
		t.Fatalf("%d lines, want %d", len(got), goroutines*lines)
	}
	for _, line := range got {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] != "line" {
			t.Fatalf("line %s: %v", line, err)
		}
	}
}

// FuzzLine checks that any message, key and value make one line that
// encoding/json reads back as the same strings (invalid UTF-8 as U+FFFD),
// and that the line is the one slog's JSONHandler writes.
func FuzzLine(f *testing.F) {
	f.Add("msg", "key", "value", int64(1))
	f.Add("a\"b\\c\n\r\t\x00\x1f\x7f", "<&>", "\u2028\u2029", int64(-1))
	f.Add("\xff\xfe", "\xed\xa0\x80", "héllo 世界 🙂", int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, msg, key, val string, n int64) {
		l, buf := testLogger(LevelDebug)
		l.With(String(key, val)).Warn(msg, Int("n", int(n)), Err(errors.New(val)))
		line := buf.String()
		if strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
			t.Fatalf("not one line: %q", line)
		}

		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var got []any
		for {
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			if d, ok := tok.(json.Delim); ok && (d == '{' || d == '}') {
				continue
			}
			got = append(got, tok)
		}
		want := []any{
			"time", "2025-01-02T03:04:05.000000006+01:00", "level", "WARN", "msg", valid(msg),
			valid(key), valid(val),
			"n", json.Number(strconv.FormatInt(n, 10)),
			"error", valid(val),
		}
		if len(got) != len(want) {
			t.Fatalf("%q decodes to %q, want %q", line, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q decodes to %q, want %q", line, got, want)
			}
		}

		if s := slogLine(t, []slog.Attr{slog.String(key, val)}, msg, slog.Int("n", int(n)), slog.Any("error", errors.New(val))); line != s {
			t.Fatalf("line\n%q\nslog writes\n%q", line, s)
		}
	})
}

// valid returns s with each byte of invalid UTF-8 replaced by U+FFFD, as
// a JSON encoder replaces it.
func valid(s string) string { return string([]rune(s)) }

// slogLine returns the line slog's JSONHandler writes at LevelWarn and the
// fixed clock, with its logger's attrs with and the line's attrs.
func slogLine(t *testing.T, with []slog.Attr, msg string, attrs ...slog.Attr) string {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, nil).WithAttrs(with)
	r := slog.NewRecord(clock, slog.LevelWarn, msg, 0)
	r.AddAttrs(attrs...)
	if err := h.Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}
