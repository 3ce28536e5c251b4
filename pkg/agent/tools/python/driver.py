# The python tool's interpreter driver, run as python3 -u -c <this> <limit>.
#
# Protocol (all lines UTF-8, one JSON value each):
#   stdin, first line:   the start nonce (for the ready answer only)
#   stdin, then:         {"id": <int>, "nonce": <str>, "code": <str>} per call
#   stdout (fd 1 dup):   <start nonce> {"id": 0, "ready": true, "python": <str>}
#                        <call nonce> {"id": <int>, "stdout": <str>, "stderr": <str>,
#                                      "value": <str|null>, "error": <bool>}
#   stderr (fd 2 dup):   <call nonce> end <id>   (after everything the call wrote)
# Each call has a fresh nonce, sent with it: the call's own code may find it
# (and so lie about its own result), but no nonce is ever valid for a later
# call, and the Go side takes exactly one answer and one end mark per call,
# for that call only (anything else is tampering: the interpreter is
# restarted). Anything else on fd 1 or fd 2 is raw output of the process
# (subprocesses, C code); the Go side attributes it to the call in flight.
def _plumb_driver():
    import ast, builtins, collections, io, json, linecache, os, sys, threading, traceback, types

    limit = int(sys.argv[1])
    half = max(limit // 2, 1)

    def read_raw_line(fd):
        buf = bytearray()
        while True:
            c = os.read(fd, 1)
            if not c or c == b"\n":
                return bytes(buf)
            buf += c

    nonce = read_raw_line(0).decode("ascii").strip()
    # Requests come on a private copy of fd 0; fd 0 itself becomes
    # /dev/null so that neither input() nor a subprocess eats requests.
    requests = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    # Answers go through private copies of fd 1 and 2, so that user code
    # closing or redirecting those cannot cut the protocol.
    out_fd = os.dup(1)
    err_fd = os.dup(2)
    try:
        import faulthandler
        faulthandler.enable(file=os.fdopen(os.dup(err_fd), "w"), all_threads=True)
    except Exception:
        pass

    # What the driver calls once user code has run is bound here, before
    # any has: patching os.write or json.dumps cannot hook the answers.
    os_write, dumps, loads = os.write, json.dumps, json.loads

    def write_all(fd, data):
        while data:
            n = os_write(fd, data)
            data = data[n:]

    def answer(nonce, obj):
        write_all(out_fd, (nonce + " " + dumps(obj) + "\n").encode("utf-8"))

    def bounded(text):
        if len(text) <= limit:
            return text
        return "%s\n... [%d characters omitted] ...\n%s" % (text[:half], len(text) - 2 * half, text[-half:])

    class Capture(io.TextIOBase):
        """A bounded text stream: keeps the first and last limit/2
        characters written, counts the rest."""

        def __init__(self, name):
            self._lock = threading.Lock()
            self._name = name
            self._reset()

        def _reset(self):
            self._head, self._hlen = [], 0
            self._tail, self._tlen = collections.deque(), 0
            self._omitted = 0

        @property
        def name(self):
            return self._name

        @property
        def encoding(self):
            return "utf-8"

        @property
        def errors(self):
            return "strict"

        def writable(self):
            return True

        def isatty(self):
            return False

        def flush(self):
            pass

        def write(self, s):
            if not isinstance(s, str):
                raise TypeError("write() argument must be str, not %s" % type(s).__name__)
            n = len(s)
            with self._lock:
                if self._hlen < half:
                    take = s[: half - self._hlen]
                    self._head.append(take)
                    self._hlen += len(take)
                    s = s[len(take):]
                if s:
                    self._tail.append(s)
                    self._tlen += len(s)
                    while self._tlen > half:
                        extra = self._tlen - half
                        first = self._tail[0]
                        if len(first) <= extra:
                            self._tail.popleft()
                            self._tlen -= len(first)
                            self._omitted += len(first)
                        else:
                            self._tail[0] = first[extra:]
                            self._tlen -= extra
                            self._omitted += extra
            return n

        def take(self):
            with self._lock:
                head, tail, omitted = "".join(self._head), "".join(self._tail), self._omitted
                self._reset()
            if omitted:
                return "%s\n... [%d characters omitted] ...\n%s" % (head, omitted, tail)
            return head + tail

    stdout, stderr = Capture("<stdout>"), Capture("<stderr>")
    sys.stdout, sys.stderr = stdout, stderr
    sys.argv = [""]

    # User code runs in a fresh __main__ module, not in this driver's
    # globals (pickle finds classes it defines through sys.modules).
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    ns = main.__dict__

    def safe_repr(v):
        try:
            return bounded(repr(v))
        except BaseException as e:
            return "<repr() failed: %s: %s>" % (type(e).__name__, e)

    def run(cid, nonce, code):
        fname = "<python-%d>" % cid
        linecache.cache[fname] = (len(code), None, code.splitlines(True), fname)
        value, error = None, False
        sys.stdout, sys.stderr = stdout, stderr
        try:
            tree = ast.parse(code, fname, "exec")
        except SyntaxError as e:  # no traceback: its frames are ast's
            tree, error = None, True
            stderr.write("".join(traceback.format_exception_only(type(e), e)))
        if tree is not None:
            try:
                last = None
                if tree.body and isinstance(tree.body[-1], ast.Expr):
                    last = ast.Expression(tree.body.pop().value)
                exec(compile(tree, fname, "exec"), ns)
                if last is not None:
                    v = eval(compile(last, fname, "eval"), ns)
                    if v is not None:
                        ns["_"] = v
                        value = safe_repr(v)
            except BaseException as e:
                error = True
                tb = e.__traceback__
                while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
                    tb = tb.tb_next  # the driver's own frames
                try:
                    stderr.write("".join(traceback.format_exception(type(e), e, tb)))
                except BaseException as e2:
                    stderr.write("%s (and formatting its traceback failed: %r)\n" % (type(e).__name__, e2))
        sys.stdout, sys.stderr = stdout, stderr
        # The end mark follows everything written to fd 2 so far; the Go
        # side answers once it has seen both the mark and the result.
        write_all(err_fd, ("%s end %d\n" % (nonce, cid)).encode("ascii"))
        answer(nonce, {"id": cid, "stdout": stdout.take(), "stderr": stderr.take(), "value": value, "error": error})

    answer(nonce, {"id": 0, "ready": True, "python": sys.version.split()[0]})
    del nonce  # the start nonce is never valid again
    while True:
        line = requests.readline()
        if not line:
            break
        try:
            req = loads(line.decode("utf-8"))
            cid, cnonce, code = int(req["id"]), str(req["nonce"]), str(req["code"])
        except Exception as e:
            write_all(err_fd, ("python driver: bad request: %r\n" % (e,)).encode("utf-8"))
            continue
        del line, req
        run(cid, cnonce, code)
        del cnonce, code
    os._exit(0)


_plumb_driver()
