# Names used but not defined here come from the earlier parts of the one script (runner/__init__.py).
"""Runner part: the worker, the process that runs the untrusted program: it locks itself down
(``_lock_down_worker``), runs the program and then answers the judge's requests, one reply line per
request line (``_worker``); the exception texts and kinds it reports (``_describe``, ``_kind``).
"""

# ------------------------------------------------------------------------------------------- worker
class _CaseTimeout(BaseException):
    """Raised by SIGALRM when one case overruns ``case_timeout`` (BaseException: harder to swallow)."""


def _program_classes(cls):
    """The qualified names of ``cls`` and its bases that are the program's own (not builtins), most
    specific first, up to 20."""
    return [c.__qualname__[:100] for c in cls.__mro__ if getattr(builtins, c.__name__, None) is not c][:20]


def _describe(exc, source=""):
    name = type(exc).__name__
    try:
        msg = str(exc)
    except _BaseException as e:  # noqa: B902 - the program's __str__ raised: its class name is the text
        msg = f"<its __str__ raised {type(e).__name__}>"
    if isinstance(exc, AssertionError) and not msg:
        msg = source.strip().splitlines()[0] if source.strip() else ""
    elif isinstance(exc, SystemExit):
        try:  # (the code may be the program's object, whose repr raises: red team, 2026-11-29)
            msg = f"the program called exit({exc.code!r})"
        except _BaseException:  # noqa: B902
            msg = "the program called exit()"
    text = f"{name}: {msg}" if msg else name
    return text[:1000]


def _kind(exc):
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, _CaseTimeout):
        return "timeout"
    return "error"


class _Printed:
    """``sys.stdout`` while the worker answers a request: what the program prints goes back with the
    reply (up to ``_MAX_PRINTED`` characters), and the judge writes it to its own ``sys.stdout``,
    where the tests may capture it (``contextlib.redirect_stdout``)."""

    def __init__(self):
        self.parts, self.size = [], 0

    def write(self, text):
        text = str(text)
        room = _MAX_PRINTED - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(len(text), room)
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False


_MAX_PRINTED = 1 << 20


def _lock_down_worker(job, enforced):
    lim = job["limits"]
    uid = job["run_uid"] if job["run_uid"] is not None else os.getuid()
    # Born in the run's memory cgroup (the supervisor joined it to fork this process) or not:
    if any(x in job.get("joined", ()) for x in _MEMORY_CGROUPS) or not lim["memory_bytes"]:
        _limits(lim, enforced, uid=uid)
    else:  # no kernel memory limit: processes x address space <= memory_mb, by construction
        _limits(lim, enforced, uid=uid, memory_bytes=lim["share_bytes"], processes=lim["share_processes"])
    if job["landlock"] and sys.platform.startswith("linux"):
        try:
            _landlock(job["workdir"], enforced)
        except (OSError, AttributeError):
            pass
    landlocked = any(e.startswith("landlock") for e in enforced)
    if job["seccomp"]:
        # IPC is denied even inside an IPC namespace: segments no process maps escape the run's memory
        # count (as do memfds and socket buffers: hidden_memory).
        install_seccomp = globals()["install_seccomp"]  # defined by seccomp.py, prepended to this text
        layer = install_seccomp(sockets="inet" if job["netns"] else "none", ipc=True,
                                keyring=True, trace=True, namespaces=True, fallocate=True,
                                sessions=not (job["pidns"] and "cgroup1-cpu" in job.get("joined", ())),
                                hidden_memory=True, host_files=True)
        if layer:
            enforced.append(layer)
    if job["run_uid"] is not None:
        _drop_root(job["run_uid"], landlocked, enforced)
    _no_network(enforced)


class _Aborted(BaseException):
    """Raised in the program when the judge gave up on the tests' function it called (the case ended
    there: a timeout, a value the tests cannot receive): the program's request unwinds and answers
    a request the judge no longer waits for."""


class _JudgeFn:
    """Worker side: a function of the tests' that the program calls (a lambda argument, a mock, the
    tests' ``input`` and ``sys.stdin``). The call runs in the judge, as the function is the tests':
    its arguments go as data or handles, its result comes back the same way, and the judge's
    requests meanwhile (the function using the program's objects) are served here."""

    def __init__(self, fid, name):
        self._fid, self.__name__, self.__qualname__ = fid, name, name

    def __call__(self, *args, **kwargs):
        return _CHANNEL[0].call_judge(self._fid, args, kwargs)

    def __repr__(self):
        return f"<function {self.__name__} of the tests>"


class _JudgeStdin:
    """The program's ``sys.stdin``: read from the judge's (``io.StringIO`` under the tests'
    ``mock.patch``; empty otherwise: EOF, as the program's own stdin was). ``buffer`` reads the
    judge's ``sys.stdin.buffer`` (bytes)."""

    encoding, errors, newlines, closed = "utf-8", "strict", None, False

    def __init__(self, prefix=""):
        self._prefix = prefix
        if not prefix:
            self.buffer = _JudgeStdin("buffer.")

    def _ask(self, name, *args):
        return _CHANNEL[0].call_judge("stdin", (self._prefix + name, *args), {})

    def read(self, size=-1):
        return self._ask("read", size)

    def readline(self, size=-1):
        return self._ask("readline", size)

    def readlines(self, hint=-1):
        return self._ask("readlines", hint)

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:  # "" or b""
            raise StopIteration
        return line

    def isatty(self):
        return False

    def readable(self):
        return True

    def fileno(self):
        import io

        raise io.UnsupportedOperation("the sandbox's stdin is the tests', not a file")


_CHANNEL = []  # the worker's one ``_Channel`` (``_JudgeFn`` calls through it)
_JUDGE_EXC = {n: c for n, c in vars(builtins).items() if isinstance(c, type) and issubclass(c, Exception)
              and not issubclass(c, StopIteration)}


class _Channel:
    """The worker's end of the judge's pipes: requests in (``rf``), replies and calls of the tests'
    functions out (``wfd``)."""

    def __init__(self, rf, wfd, handles):
        import _thread

        self.rf, self.wfd, self.handles = rf, wfd, handles
        self.depth = 0  # requests being served: > 1 inside a call of the tests' function
        self.calls = 0  # calls of the tests' functions made: each answer names its call
        # Program threads may call the tests' functions at once, and a call's answer may come while
        # another thread reads the pipe (they took each other's answers and hung the run; then a
        # lock held while waiting deadlocked nested calls from threads: red-team findings,
        # 2026-11-29). So one thread reads at a time (``reading``) and hands each message to its
        # addressee: an answer to the thread that made the call (``answers``, woken through its
        # gate in ``sleepers``), a request to whoever read it. ``_thread`` locks, not ``threading``
        # (7 ms to import, every run).
        self._lock = _thread.allocate_lock
        self.mu = _thread.allocate_lock()
        self.wmu = _thread.allocate_lock()  # one message written at a time
        self.reading = False
        self.answers = {}
        self.pending = set()  # calls sent and not yet answered or given up
        self.sleepers = {}  # call number (None: the main loop) -> a held lock it sleeps on

    def _wake(self, key=False):
        """Under ``mu``: wake the thread waiting for call ``key``, or (by default) any one, so that
        someone reads the pipe while this thread does not."""
        if key is False:
            gate = self.sleepers.pop(next(iter(self.sleepers))) if self.sleepers else None
        else:
            gate = self.sleepers.pop(key, None)
        if gate is not None:
            gate.release()

    def _next(self, n):
        """The answer to call ``n`` (None: the main loop's next request). Requests read meanwhile
        are served by the thread that read them; answers read for other calls are handed over."""
        while True:
            with self.mu:
                if n is not None and n in self.answers:
                    return self.answers.pop(n)
                gate = None
                if self.reading:
                    gate = self.sleepers[n] = self._lock()
                    gate.acquire()
                else:
                    self.reading = True
            if gate is not None:
                try:
                    gate.acquire()  # released by the reader: our answer came, or the pipe is free
                finally:
                    with self.mu:
                        if self.sleepers.get(n) is gate:
                            del self.sleepers[n]
                continue
            try:
                line = self.rf.readline()
            except _BaseException:  # noqa: B902 - its timer fired: another thread reads instead
                with self.mu:
                    self.reading = False
                    self._wake()
                raise
            with self.mu:
                self.reading = False
            if not line:
                os._exit(0)
            m = _loads(line)
            if "op" in m:
                with self.mu:
                    self._wake()  # someone else reads while this thread serves
                self.answer(m)
                continue
            k = m.get("n")
            with self.mu:
                if k == n:
                    self._wake()  # someone else reads now
                    return m
                if k in self.pending:  # another thread's call (an answer to one given up: dropped)
                    self.answers[k] = m
                    self._wake(k)

    def _send(self, data):
        with self.wmu:
            while data:
                data = data[_write(self.wfd, data):]

    def loop(self):
        while True:
            self.answer(self._next(None))

    def answer(self, req):
        out = self.serve(req)
        with self.wmu:
            try:
                _emit(self.wfd, out)
            except BrokenPipeError:
                os._exit(0)  # the judge is gone: nothing of ours to report
            except (ValueError, TypeError, RecursionError) as exc:  # an unencodable reply: say so
                _emit(self.wfd, {"id": req["id"], "raise": "ValueError", "kind": "error",
                                 "msg": f"unencodable return value: {exc}"[:1000]})

    def call_judge(self, fid, args, kwargs):
        """Call the tests' function ``fid`` in the judge and wait for its answer (``_next``), serving
        the judge's requests that come meanwhile."""
        handles = self.handles
        with self.mu:
            self.calls += 1
            n = self.calls
            self.pending.add(n)
        try:
            m = self._call(n, fid, args, kwargs)
        finally:
            with self.mu:
                self.pending.discard(n)
                self.answers.pop(n, None)
        if m.get("abort"):
            raise _Aborted("the tests' function did not finish in the judge")
        if "exc" in m:
            cls = _JUDGE_EXC.get(m["exc"], RuntimeError)
            try:
                exc = cls(*_dec_arg(m["args"], handles)) if "args" in m else cls(m.get("msg", ""))
            except Exception:  # noqa: BLE001 - a class that wants other arguments: the text
                exc = cls(m.get("msg", ""))
            if "tok" in m:  # the tests' own exception: it goes back to them as itself
                exc._judge_tok = m["tok"]
            raise exc
        value = _dec_arg(m.get("ret"), handles)
        # what the tests' function changed in place
        _mirror_changes([*args, *kwargs.values()], m.get("mut"), lambda new: _dec_arg(new, handles))
        return value

    def _call(self, n, fid, args, kwargs):
        handles = self.handles
        msg = {"cb": fid, "n": n, "args": [_enc(a, handles) for a in args],
               "kw": [[str(k), _enc(v, handles)] for k, v in kwargs.items()]}
        if isinstance(sys.stdout, _Printed) and sys.stdout.parts:
            # printed before the call goes first, so the tests' capture keeps the program's order
            msg["out"] = "".join(sys.stdout.parts)
            sys.stdout.parts, sys.stdout.size = [], 0
        data = (_dumps(msg) + "\n").encode("utf-8", "replace")
        if len(data) > _MAX_LINE:  # the judge would drop it and the case would hang on its answer
            raise ValueError(f"a call of the tests' function over {_MAX_LINE >> 20} MB (its arguments)")
        self._send(data)
        return self._next(n)

    def serve(self, req):
        """One request of the judge -> its reply (a value, or the exception the program raised)."""
        handles = self.handles
        out = {"id": req["id"]}
        budget = req.get("budget") if self.depth == 0 else None  # nested: the outer request's clock runs
        printed = _Printed()
        saved_stdout, sys.stdout = sys.stdout, printed  # what the program prints answers with the reply
        self.depth += 1
        try:
            if budget:
                signal.setitimer(signal.ITIMER_REAL, budget)
            try:
                value = self.do(req, out)
                out["v"] = _enc(value, handles)
            finally:
                if budget:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                sys.stdout = saved_stdout
                self.depth -= 1
        except _BaseException as exc:  # noqa: B902
            out = self.raised(req, exc)
        if printed.parts:
            out["out"] = "".join(printed.parts)
        return out

    def do(self, req, out):
        handles = self.handles
        op = req["op"]
        obj = handles.objs[req["ref"]] if op != "seed" else None
        if op == "seed":  # the tests seeded their random module: so is the program's
            import random

            return random.seed(_dec_arg(req["a"], handles))
        if op == "call":
            args = [_dec_arg(a, handles) for a in req["args"]]
            kwargs = {k: _dec_arg(a, handles) for k, a in req["kw"]}
            value = obj(*args, **kwargs)
            # Arguments changed in place go back (by value), and only those.
            out["mut"] = _changed([*args, *kwargs.values()], [*req["args"], *(w for _, w in req["kw"])],
                                  lambda a: _enc(a, handles))
            return value
        if op == "next":
            return next(obj)
        if op == "str":
            return str(obj)
        if op == "isinstance":
            return isinstance(_dec_arg(req["obj"], handles), obj)
        if op == "attr":
            return getattr(obj, req["name"])
        if op == "iter":
            return iter(obj)  # sent as a handle: the judge takes its items in chunks ("take")
        if op == "take":
            # up to n items; "end": the iterator is exhausted (StopIteration is not an error)
            value, n = [], min(int(req["n"]), _MAX_ITEMS)
            try:
                while len(value) < n:
                    value.append(next(obj))
            except StopIteration:
                out["end"] = True
            return value
        if op == "repr":
            return repr(obj)
        if op == "setattr":
            return setattr(obj, req["name"], _dec_arg(req["v"], handles))
        if op == "delattr":
            return delattr(obj, req["name"])
        if op == "setitem":
            obj[_dec_arg(req["key"], handles)] = _dec_arg(req["v"], handles)
            return None
        if op == "delitem":
            del obj[_dec_arg(req["key"], handles)]
            return None
        if op == "cmp":
            return getattr(operator, req["name"])(obj, _dec_arg(req["other"], handles))
        if op == "contains":
            return bool(_dec_arg(req["other"], handles) in obj)
        if op == "binop":
            fn, other = getattr(operator, req["name"] + ("_" if req["name"] in ("and", "or") else "")), \
                _dec_arg(req["other"], handles)
            return fn(other, obj) if req.get("reflected") else fn(obj, other)
        if op == "unop":
            return getattr(operator, req["name"])(obj)
        if op == "enter":
            return obj.__enter__()
        if op == "exit":
            exc = getattr(builtins, req["exc"], Exception) if req.get("exc") else None
            obj.__exit__(exc, exc() if exc else None, None)
            return None
        if op == "len":
            return len(obj)
        if op == "item":
            return obj[_dec_arg(req["key"], handles)]
        raise ValueError(f"unknown request {op!r}")

    def raised(self, req, exc):
        """The reply for a request whose program code raised ``exc``: its builtin class by name, its
        data arguments, and for the program's own classes their names, text and fields."""
        handles = self.handles
        name = type(exc).__name__ if isinstance(exc, _CaseTimeout) else _builtin_name(type(exc))
        out = {"id": req["id"], "raise": name, "msg": _describe(exc), "kind": _kind(exc)}
        tok = getattr(exc, "_judge_tok", None) if type(exc) in _JUDGE_EXC.values() else None
        if type(tok) is int:
            out["tok"] = tok
        try:
            if _small(exc.args, 1000):
                out["args"] = _enc(exc.args, None)
        except _BaseException:  # noqa: B902 - args that are not data stay behind
            pass
        mine = _program_classes(type(exc))
        if mine:  # the program's exception classes, most specific first: the tests catch them by class
            out["cls"] = mine
            try:
                out["text"] = str(exc)[:1000]
            except _BaseException:  # noqa: B902 - its __str__ raised: the message stays the class name
                pass
            fields = {}
            for k, v in list(getattr(exc, "__dict__", {}).items())[:50]:
                try:
                    fields[str(k)[:100]] = _enc(v, handles)
                except _BaseException:  # noqa: B902 - a field that cannot be sent stays behind
                    pass
            out["fields"] = fields
        return out


def _worker(job, rfd, wfd):
    """Lock down, run the program, then serve the judge: one request line in, one reply line out
    (and, inside a request, calls of the tests' functions out and their answers in)."""
    enforced = []
    _lock_down_worker(job, enforced)
    rf = os.fdopen(rfd, "rb", buffering=1 << 16)
    handles = _Handles()
    channel = _Channel(rf, wfd, handles)
    _CHANNEL.append(channel)

    def on_alarm(signum, frame):
        raise _CaseTimeout("the test case ran longer than its case_timeout")

    signal.signal(signal.SIGALRM, on_alarm)
    # input() and sys.stdin are the tests' (a test mocks them in the judge, where its code runs)
    builtins.input, sys.stdin = _JudgeFn("input", "input"), _JudgeStdin()
    g = {"__name__": "__sandbox__", "__builtins__": builtins}
    try:
        _exec(_compile(job["program"], "<program>", "exec"), g)
    except _BaseException as exc:  # noqa: B902 - SystemExit, KeyboardInterrupt: the program's doing
        _emit(wfd, {"load": _describe(exc), "kind": _kind(exc), "enforced": enforced})
        os._exit(0)
    names = {}
    for name, v in list(g.items()):
        if name.startswith("__"):
            continue
        if type(v).__name__ == "module":
            names[name] = {"mod": getattr(v, "__name__", "")[:200]}
            continue
        try:
            if _small(v):  # plain data (a constant, a table) is sent as a value; a big table stays
                data = _enc(v, None)
                if len(_dumps(data)) < 1 << 16:
                    names[name] = {"v": data}
                    continue
        except _BaseException:  # noqa: B902 - not data, or the program's own code raised
            pass
        names[name] = {"H": handles.add(v), "t": type(v).__name__[:100]}
        if isinstance(v, type) and issubclass(v, _BaseException) and _program_classes(v):
            names[name]["exc"] = [v.__qualname__[:100], _builtin_name(v)]  # the judge's stand-in
    _emit(wfd, {"load": None, "names": names, "enforced": enforced})
    channel.loop()
