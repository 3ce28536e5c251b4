package python

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/plumbhq/plumb/pkg/agent"
	"github.com/plumbhq/plumb/pkg/backend"
	"github.com/plumbhq/plumb/pkg/backend/backendtest"
	"github.com/plumbhq/plumb/pkg/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noPython3 rewrites commands so that their python3 is missing.
var noPython3 = strings.NewReplacer("python3", "python3-absent-here").Replace

// harness is one Manager over host interpreters, and one State per
// thread (as one agent context would keep).
type harness struct {
	t      *testing.T
	m      *Manager
	local  *backendtest.LocalProcesses
	states map[string]*agent.State
	now    time.Time
	mu     sync.Mutex
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, local: &backendtest.LocalProcesses{Dir: t.TempDir()}, states: map[string]*agent.State{}, now: time.Unix(1_700_000_000, 0)}
	h.m = New(cfg, WithResolver(h.local.Resolver()), WithLogger(zaptest.NewLogger(t)), WithClock(h.clock))
	t.Cleanup(h.m.Close)
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

func (h *harness) state(thread string) *agent.State {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.states[thread]
	if st == nil {
		st = agent.NewState()
		h.states[thread] = st
	}
	return st
}

// call runs code in thread through the tool (timeout 0 = the default).
func (h *harness) call(thread, code string, timeoutS int) (agent.ToolResult, error) {
	a := map[string]any{"code": code}
	if timeoutS > 0 {
		a["timeout_s"] = timeoutS
	}
	raw, _ := json.Marshal(a)
	tool := h.m.Tool()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // hang guard
	defer cancel()
	return tool.Func(ctx, &agent.ToolRequest{
		Call:  model.ToolCall{ID: "c", Name: ToolName, Args: string(raw)},
		Run:   &agent.RunContext{ThreadID: thread},
		State: h.state(thread),
	})
}

// step is one call and what its result must show.
type step struct {
	code     string
	timeoutS int
	isError  bool
	has      []string
	lacks    []string
	exact    string
}

func (h *harness) run(thread string, steps []step) {
	h.t.Helper()
	for i, s := range steps {
		res, err := h.call(thread, s.code, s.timeoutS)
		if err != nil {
			h.t.Fatalf("step %d (%q): %v", i, s.code, err)
		}
		if res.IsError != s.isError {
			h.t.Errorf("step %d (%q): is_error = %v, want %v:\n%s", i, s.code, res.IsError, s.isError, cut(res.Content))
		}
		if s.exact != "" && res.Content != s.exact {
			h.t.Errorf("step %d (%q): content\n%q\nwant\n%q", i, s.code, cut(res.Content), s.exact)
		}
		for _, want := range s.has {
			if !strings.Contains(res.Content, want) {
				h.t.Errorf("step %d (%q): content lacks %q:\n%s", i, s.code, want, cut(res.Content))
			}
		}
		for _, bad := range s.lacks {
			if strings.Contains(res.Content, bad) {
				h.t.Errorf("step %d (%q): content has %q:\n%s", i, s.code, bad, cut(res.Content))
			}
		}
	}
}

// cut shortens s for failure messages.
func cut(s string) string {
	if len(s) <= 4000 {
		return s
	}
	return s[:2000] + fmt.Sprintf("\n[... %d bytes ...]\n", len(s)-4000) + s[len(s)-2000:]
}

const lost = "the interpreter was restarted and its state (variables, imports) was lost"

// TestInterpreter runs sequences of calls in one thread's interpreter.
func TestInterpreter(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{name: "state persists between calls", steps: []step{
			{code: "x = 41\nimport math", exact: "(no output)"},
			{code: "def double(v):\n    return 2 * v", exact: "(no output)"},
			{code: "x + 1", exact: "value:\n42"},
			{code: "double(math.sqrt(16))", exact: "value:\n8.0"},
		}},
		{name: "stdout, stderr and the last expression", steps: []step{
			{code: "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\n'done'", exact: "stdout:\nto out\n\nstderr:\nto err\n\nvalue:\n'done'"},
			{code: "print('a')\nNone", exact: "stdout:\na"},
			{code: "for i in range(3):\n    i", exact: "(no output)"},
			{code: "[1, 2][0]", exact: "value:\n1"},
		}},
		{name: "an exception is an error with its traceback, and the state stays", steps: []step{
			{code: "y = 5", exact: "(no output)"},
			{code: "def f():\n    return 1 / 0\nprint('before')\nf()", isError: true,
				has:   []string{"stdout:\nbefore", "stderr:\nTraceback (most recent call last):", `File "<python-2>", line 2, in f`, "ZeroDivisionError: division by zero"},
				lacks: []string{`"<string>"`}},
			{code: "def g(:\n  pass", isError: true, has: []string{"SyntaxError"}, lacks: []string{"ast.py"}},
			{code: "import sys\nsys.exit(3)", isError: true, has: []string{"SystemExit: 3"}},
			{code: "input()", isError: true, has: []string{"EOFError"}},
			{code: "y", exact: "value:\n5"},
		}},
		{name: "subprocess output is captured", steps: []step{
			{code: "import os\nos.system('echo from-shell; echo shell-err >&2')", has: []string{"stdout:\nfrom-shell", "stderr:\nshell-err", "value:\n0"}},
			{code: "import subprocess\nsubprocess.run(['cat'], timeout=5).returncode", exact: "value:\n0"}, // stdin is empty: cat ends
		}},
		{name: "a timeout restarts the interpreter and loses its state", steps: []step{
			{code: "z = 7\nimport time", exact: "(no output)"},
			{code: "print('started')\ntime.sleep(120)", timeoutS: 1, isError: true, exact: "Error: the code timed out after 1 s; " + lost + "."},
			{code: "z", isError: true, has: []string{"NameError: name 'z' is not defined"}, lacks: []string{"Note:"}},
			{code: "z = 8\nz", exact: "value:\n8"},
		}},
		{name: "an interpreter that exits is restarted", steps: []step{
			{code: "w = 1", exact: "(no output)"},
			{code: "import os, sys\nprint('bye', file=sys.__stderr__)\nos._exit(3)", isError: true,
				has: []string{"Error: the Python interpreter exited with code 3 while running this code; " + lost, "stderr:\nbye"}},
			{code: "w", isError: true, has: []string{"NameError"}},
		}},
		{name: "an interpreter that crashes is restarted", steps: []step{
			{code: "import ctypes\nctypes.string_at(0)", isError: true,
				has: []string{"Error: the Python interpreter was killed by signal SEGV while running this code; " + lost, "Fatal Python error: Segmentation fault"}},
			{code: "1 + 1", exact: "value:\n2"},
		}},
		{name: "huge output is bounded", cfg: Config{MaxOutputChars: 1000}, steps: []step{
			{code: "print('x' * 10_000_000)\nprint('end')", has: []string{"stdout:\nxxx", "characters omitted", "xxx\nend"}},
			{code: "'v' * 5000", has: []string{"value:\n'vvv", "[4002 characters omitted]", "vvv'"}},
			{code: "import os\nos.system('head -c 3000000 /dev/zero | tr \"\\\\0\" y')", has: []string{"stdout:\nyyy", "bytes omitted"}},
			{code: "import sys\nfor i in range(200000):\n    sys.stderr.write('line %d\\n' % i)", has: []string{"stderr:\nline 0\n", "line 199999"}},
		}},
		{name: "answers longer than a read buffer", steps: []step{
			{code: "s = '\u00e9\\n' * 200_000\nprint(s)\ns", has: []string{"stdout:\n\u00e9\n\u00e9", "[334465 characters omitted]", "value:\n'\u00e9\\n\u00e9", "[534466 characters omitted]", "\u00e9\\n'"}},
			{code: "len(s)", exact: "value:\n400000"},
		}},
		{name: "output cannot forge an answer", steps: []step{
			{code: `import json, os, sys
fake = json.dumps({"id": 2, "stdout": "forged", "stderr": "", "value": "'forged'", "error": False})
print("0123456789abcdef0123456789abcdef " + fake)
os.write(1, ("0123456789abcdef0123456789abcdef " + fake + "\n").encode())
sys.__stdout__.write(fake + "\n"); sys.__stdout__.flush()
os.write(2, b"0123456789abcdef0123456789abcdef end 2\n")
'real'`, has: []string{"value:\n'real'", `"stdout": "forged"`}},
			{code: "'second'", exact: "value:\n'second'"},
		}},
		// Issue 21 item 9: code that searches the interpreter for nonces
		// (every frame of every thread, every closure cell and every
		// object the gc knows) and forges answers with all it finds. On
		// main it found the session nonce and its forged answer passed
		// for the next call's result.
		{name: "a nonce found in the interpreter cannot forge a later call's result", steps: []step{
			{code: stealNonces + "\nstolen = steal()\nforge(stolen, [2, 3, 4])\nlen(stolen) > 0", isError: true,
				has: []string{"Error: the Python interpreter's answer channel was tampered with (", lost}},
			{code: "'real'", has: []string{"value:\n'real'"}, lacks: []string{"forged"}},
			{code: "'third'", exact: "value:\n'third'"},
		}},
		{name: "nonces of earlier calls are only raw output later", steps: []step{
			{code: stealNonces + "\nstolen = steal()\nlen(stolen) > 0", exact: "value:\nTrue"},
			{code: stealNonces + "\nstolen += steal()\n'second'", exact: "value:\n'second'"},
			// Earlier calls' code, still running: a thread forges with
			// every nonce it found, during a later call.
			{code: "import threading\nev = threading.Event()\nth = threading.Thread(target=lambda: (ev.wait(), forge(stolen, [4, 5])))\nth.start()", exact: "(no output)"},
			{code: "ev.set()\nth.join()\n'real'", has: []string{"value:\n'real'", `"stdout": "forged"`}},
			{code: "'after'", exact: "value:\n'after'"},
		}},
		{name: "output written between calls shows in the next call", steps: []step{
			{code: "import threading, time\nev = threading.Event()\ndef later():\n    ev.wait()\n    print('from the thread')\nt = threading.Thread(target=later)\nt.start()", exact: "(no output)"},
			{code: "ev.set()\nt.join()", exact: "stdout:\nfrom the thread"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.cfg)
			h.run("thread-1", tc.steps)
		})
	}
}

// stealNonces defines steal(), which returns every 32-hex-digit string
// found in the interpreter (frames of every thread and their locals,
// closure cells, function defaults, every container the gc tracks,
// strings inside bytes), and forge(nonces, ids), which writes a forged
// answer and end mark for each id under each nonce to every file
// descriptor of the process that takes it (the driver's private copies
// of 1 and 2 included).
const stealNonces = `import gc, json, os, re, sys
def steal():
    pat = re.compile(r"[0-9a-f]{32}")
    found = []
    def scan(o, depth=0):
        if isinstance(o, (bytes, bytearray)):
            o = bytes(o).decode("latin-1")
        if isinstance(o, str):
            found.extend(m for m in pat.findall(o) if m not in found)
        elif depth < 2 and isinstance(o, dict):
            for v in list(o.values()):
                scan(v, depth + 1)
        elif depth < 2 and isinstance(o, (list, tuple)):
            for v in o:
                scan(v, depth + 1)
    for f in sys._current_frames().values():
        while f is not None:
            scan(dict(f.f_locals))
            f = f.f_back
    for o in gc.get_objects():
        if type(o).__name__ == "cell":
            try:
                scan(o.cell_contents)
            except ValueError:
                pass
        elif callable(o) and getattr(o, "__closure__", None):
            for c in o.__closure__:
                try:
                    scan(c.cell_contents)
                except ValueError:
                    pass
        elif isinstance(o, (dict, list, tuple)):
            scan(o, 1)
    return found
def forge(nonces, ids):
    for n in nonces:
        for cid in ids:
            fake = json.dumps({"id": cid, "stdout": "forged", "stderr": "", "value": "'forged'", "error": False})
            for fd in range(1, 32):
                try:
                    os.write(fd, ("%s %s\n%s end %d\n" % (n, fake, n, cid)).encode())
                except OSError:
                    pass`

// TestIdleInterpreterClosed: the reaper closes an interpreter idle for
// the idle timeout, and the next call says its state is gone.
func TestIdleInterpreterClosed(t *testing.T) {
	h := newHarness(t, Config{IdleTimeout: time.Hour})
	h.run("t", []step{{code: "v = 1", exact: "(no output)"}})
	h.advance(30 * time.Minute)
	h.m.reap()
	h.run("t", []step{{code: "v", exact: "value:\n1"}})
	h.advance(61 * time.Minute)
	h.m.reap()
	if n := h.local.Running(); n != 0 {
		t.Errorf("%d interpreters run after the idle timeout, want 0", n)
	}
	h.run("t", []step{{code: "v", isError: true, has: []string{
		"Note: this call ran in a new Python interpreter because the previous one was closed: it was idle for more than 1h0m0s.",
		"NameError"}}})
}

// TestMaxInterpreters: at the cap, the least recently used interpreter of
// another thread is closed, and that thread is told on its next call.
func TestMaxInterpreters(t *testing.T) {
	h := newHarness(t, Config{MaxInterpreters: 2})
	run := func(thread string, s step) {
		t.Helper()
		h.advance(time.Second) // calls are ordered in time
		h.run(thread, []step{s})
	}
	run("a", step{code: "n = 'a'", exact: "(no output)"})
	run("b", step{code: "n = 'b'", exact: "(no output)"})
	run("c", step{code: "n = 'c'", exact: "(no output)"}) // closes a's
	if n := h.local.Running(); n != 2 {
		t.Errorf("%d interpreters run, want 2", n)
	}
	run("b", step{code: "n", exact: "value:\n'b'"})
	run("a", step{code: "n", isError: true, has: []string{"agentd runs at most 2 interpreters and this one was the least recently used", "NameError"}}) // closes c's
	run("b", step{code: "n", exact: "value:\n'b'"})
	run("c", step{code: "n", isError: true, has: []string{"NameError"}})
}

// TestCallsInOneThreadSerialize: concurrent calls of one thread run one
// at a time in the same interpreter.
func TestCallsInOneThreadSerialize(t *testing.T) {
	h := newHarness(t, Config{})
	h.run("t", []step{{code: "count = 0\nimport time", exact: "(no output)"}})
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.call("t", "c = count\ntime.sleep(0.01)\ncount = c + 1", 0)
			if err != nil || res.IsError || res.Content != "(no output)" {
				errs <- fmt.Sprintf("%v %v %q", err, res.IsError, res.Content)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	h.run("t", []step{{code: "count", exact: "value:\n8"}})
	if n := h.local.Started(); n != 1 {
		t.Errorf("%d interpreters started, want 1", n)
	}
}

// TestCloseStopsInterpreters: Close ends every interpreter, and later
// calls fail plainly.
func TestCloseStopsInterpreters(t *testing.T) {
	h := newHarness(t, Config{})
	h.run("a", []step{{code: "1", exact: "value:\n1"}})
	h.run("b", []step{{code: "2", exact: "value:\n2"}})
	h.m.Close()
	if n := h.local.Running(); n != 0 {
		t.Errorf("%d interpreters run after Close, want 0", n)
	}
	if _, err := h.call("a", "1", 0); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("call after Close: %v, want shutting down", err)
	}
}

// TestOffered: the model is offered python only when the thread's
// backend starts processes and has python3; a call anyway says why not.
func TestOffered(t *testing.T) {
	cases := []struct {
		name    string
		local   *backendtest.LocalProcesses // nil: the backend cannot start processes
		offered bool
		callErr string
	}{
		{name: "python3 present", local: &backendtest.LocalProcesses{}, offered: true},
		{name: "no python3 in the image", local: &backendtest.LocalProcesses{Rewrite: noPython3}, callErr: "sandbox image has no python3; use execute instead"},
		{name: "no sandbox", callErr: "this thread has no sandbox"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := []Option{WithLogger(zaptest.NewLogger(t))}
			if tc.local != nil {
				tc.local.Dir = t.TempDir()
				opts = append(opts, WithResolver(tc.local.Resolver()))
			}
			m := New(Config{}, opts...)
			defer m.Close()
			rc := &agent.RunContext{ThreadID: "t"}
			for range 2 { // the second model call uses the cached probe
				var got []model.ToolDef
				h := m.Middleware().WrapModel(func(_ context.Context, req *agent.ModelRequest) (model.Response, error) {
					got = req.Tools
					return model.Response{}, nil
				})
				tool := m.Tool()
				defs := []model.ToolDef{{Name: "execute"}, tool.Definition(), {Name: "read_file"}}
				if _, err := h(context.Background(), &agent.ModelRequest{Tools: defs, Run: rc}); err != nil {
					t.Fatal(err)
				}
				offered := len(got) == 3 && got[1].Name == ToolName
				if offered != tc.offered || (!offered && len(got) != 2) {
					t.Errorf("tools %v, want python offered = %v", got, tc.offered)
				}
				if len(defs) != 3 {
					t.Errorf("the request's tool slice was changed in place")
				}
			}
			res, err := m.Tool().Func(context.Background(), &agent.ToolRequest{Call: model.ToolCall{Args: `{"code":"6*7"}`}, Run: rc, State: agent.NewState()})
			switch {
			case tc.callErr == "" && (err != nil || res.Content != "value:\n42"):
				t.Errorf("call: %v %q", err, res.Content)
			case tc.callErr != "" && (err == nil || !strings.Contains(err.Error(), tc.callErr)):
				t.Errorf("call: %v, want %q", err, tc.callErr)
			}
			if tc.local != nil && tc.local.Rewrite != nil && tc.local.Started() != 0 {
				t.Errorf("an interpreter was started without python3")
			}
		})
	}
}

// TestStartFailure: when python3 cannot start, the call fails with what
// the shell said, and nothing is left running.
func TestStartFailure(t *testing.T) {
	local := &backendtest.LocalProcesses{Dir: t.TempDir(), Rewrite: noPython3}
	m := New(Config{}, WithResolver(local.Resolver()), WithLogger(zaptest.NewLogger(t)))
	defer m.Close()
	_, err := m.Tool().Func(context.Background(), &agent.ToolRequest{Call: model.ToolCall{Args: `{"code":"1"}`}, Run: &agent.RunContext{ThreadID: "t"}})
	if err == nil || !strings.Contains(err.Error(), "start the Python interpreter") || !strings.Contains(err.Error(), "python3-absent-here") {
		t.Errorf("err = %v", err)
	}
	if m.live != 0 || local.Running() != 0 {
		t.Errorf("live = %d, running = %d after a failed start", m.live, local.Running())
	}
}

// TestSplitter: answers are found wherever the nonce starts, whatever the
// read sizes; raw bytes pass through in order; a long raw line without a
// newline is passed on in parts.
func TestSplitter(t *testing.T) {
	nonce := "N0NCE "
	long := strings.Repeat("r", 100)
	cases := []struct {
		name     string
		in       string
		raw      string
		payloads []string
	}{
		{name: "answer alone", in: nonce + `{"id":1}` + "\n", payloads: []string{`{"id":1}`}},
		{name: "raw then answer on the same line", in: "partial" + nonce + "end 3\nafter\n", raw: "partialafter\n", payloads: []string{"end 3"}},
		{name: "forgery with another nonce", in: "OTHER1 {}\n", raw: "OTHER1 {}\n"},
		{name: "long raw line, then an answer", in: long + nonce + "x\n", raw: long, payloads: []string{"x"}},
		{name: "no final newline", in: "tail", raw: "tail"},
	}
	for _, tc := range cases {
		for _, oneByte := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/one-byte=%v", tc.name, oneByte), func(t *testing.T) {
				var r io.Reader = strings.NewReader(tc.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				sp := splitter{r: bufio.NewReaderSize(r, 16), prefix: func() []byte { return []byte(nonce) }, max: 1 << 20}
				var raw strings.Builder
				var payloads []string
				for {
					data, line, err := sp.next()
					raw.Write(data)
					if line != nil {
						payloads = append(payloads, string(line))
					}
					if err != nil {
						break
					}
				}
				if raw.String() != tc.raw || fmt.Sprint(payloads) != fmt.Sprint(tc.payloads) {
					t.Errorf("raw %q payloads %q, want %q %q", raw.String(), payloads, tc.raw, tc.payloads)
				}
			})
		}
	}
}

// TestDefaultResolver: a composite-like backend is looked through to its
// default backend.
func TestDefaultResolver(t *testing.T) {
	local := &backendtest.LocalProcesses{}
	if ps, ex := DefaultResolver(router{def: localBackend{LocalProcesses: local}}); ps == nil || ex == nil {
		t.Errorf("through Default(): %v %v", ps, ex)
	}
	if ps, ex := DefaultResolver(localBackend{LocalProcesses: local}); ps == nil || ex == nil {
		t.Errorf("directly: %v %v", ps, ex)
	}
	if ps, ex := DefaultResolver(router{def: router{}}); ps != nil || ex != nil {
		t.Errorf("no starter: %v %v", ps, ex)
	}
	if ps, ex := DefaultResolver(nil); ps != nil || ex != nil {
		t.Errorf("nil backend: %v %v", ps, ex)
	}
}

// router is a routing backend; only Default is used.
type router struct {
	backend.Backend
	def backend.Backend
}

func (r router) Default() backend.Backend { return r.def }

// localBackend makes LocalProcesses a backend.Backend; only its process and
// execute methods are used.
type localBackend struct {
	backend.Backend
	*backendtest.LocalProcesses
}

// TestCancelledCall: when the run cancels a call whose code still runs,
// the interpreter is closed (it cannot take the next call) and the next
// call says why its state is gone.
func TestCancelledCall(t *testing.T) {
	h := newHarness(t, Config{})
	h.run("t", []step{{code: "v = 1\nimport time", exact: "(no output)"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := h.m.Tool().Func(ctx, &agent.ToolRequest{
			Call: model.ToolCall{Args: `{"code":"open('started', 'w').close()\ntime.sleep(120)"}`},
			Run:  &agent.RunContext{ThreadID: "t"}, State: h.state("t"),
		})
		errc <- err
	}()
	deadline := time.Now().Add(time.Minute) // hang guard
	for {
		if _, err := os.Stat(filepath.Join(h.local.Dir, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the code did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v, want context.Canceled", err)
	}
	if n := h.local.Running(); n != 0 {
		t.Errorf("%d interpreters run after the cancelled call, want 0", n)
	}
	h.run("t", []step{{code: "v", isError: true, has: []string{"previous one was closed: the call that used it was cancelled.", "NameError"}}})
}
