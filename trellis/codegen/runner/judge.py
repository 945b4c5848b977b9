# Names used but not defined here come from the earlier parts of the one script (runner/__init__.py).
"""Runner part: the judge, the process that runs the trusted test code: its end of the worker's pipes
(``_Rpc``), the tests' arguments the program changed in place (``_mirror``), its own lockdown and
the loop over the cases (``_judge``), which writes one event per case to the result pipe.
"""

# ------------------------------------------------------------------------------------------- judge
class _Rpc:
    """The judge's end of the worker's pipes: one request, one reply, matched by a random id."""

    def __init__(self, wfd, rfd):
        self.wfd, self.rfd = wfd, rfd
        self.buf = b""
        self.program_decided = False  # this case used the program's own ==, < or in (``_Remote``)
        self.exc_classes = {}  # the program's exception classes (qualified name) -> the judge's stand-ins
        self.streams = {}  # iterator handle -> [items taken and not yet used, exhausted?, next chunk size]
        self.lost = None  # why the worker can no longer be asked
        self.deadline = None  # the current case's end (case_timeout), monotonic
        self.skipping = False  # inside a reply over _MAX_LINE, dropping it up to its newline
        self.abandoned = set()  # ids of requests whose case timed out here: late replies dropped
        self.raised_here = {}  # token -> (an exception of the tests' own class their function raised, request id)
        self.waiting = []  # ids of the requests waiting for their replies, innermost last
        self.early = {}  # id -> the reply of a waiting outer request, read before the inner one's

    def _line(self):
        while b"\n" not in self.buf:
            timeout = None if self.deadline is None else max(0.0, self.deadline + 1.0 - _clock())
            ready, _, _ = select.select([self.rfd], [], [], timeout)
            if not ready:
                self.lost = "the program stopped answering after its case_timeout"
                raise _WorkerLost(self.lost)
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                self.lost = "the program's process ended"
                raise _WorkerLost(self.lost)
            if self.skipping:  # the rest of an oversized line: dropped as it comes
                if b"\n" in chunk:
                    self.buf = chunk.split(b"\n", 1)[1]
                    self.skipping = False
                    raise _TooBig(f"the program returned a value over {_MAX_LINE >> 20} MB")
                continue
            self.buf += chunk
            if len(self.buf) > _MAX_LINE and b"\n" not in self.buf:
                self.buf, self.skipping = b"", True
        line, self.buf = self.buf.split(b"\n", 1)
        return line

    def first(self):
        """The worker's greeting (the program loaded), after the calls of ``input()`` that loading
        made (answered as the tests' stdin answers before any test ran: EOF)."""
        try:
            while True:
                msg = _loads(self._line())
                if type(msg) is dict and "cb" in msg:
                    try:
                        self.answer(msg)
                    except (_WorkerLost, _ProtocolError):
                        raise
                    except _BaseException:  # noqa: B902 - no case to fail: the program's load fails
                        self.abort(msg)
                    continue
                return msg
        except (_ProtocolError, ValueError, TypeError, RecursionError, MemoryError):
            self.lost = "the program's process sent a malformed message"
            raise _WorkerLost(self.lost) from None

    def answer(self, msg):
        """The program called a function of the tests' (``_JudgeFn`` in the worker): run it here,
        where it belongs, and send its result (data or a handle) or the exception it raised. A
        BaseException (the case's timeout, a value the tests cannot receive) is not sent: it ends
        the case, and the caller abandons the request the program was answering."""
        fid, args, kw = msg.get("cb"), msg.get("args"), msg.get("kw")
        if type(args) is not list or type(kw) is not list:
            raise _ProtocolError("malformed call of the tests' function")
        if fid == "input":
            fn = _tests_input
        elif fid == "stdin" and args and args[0] in _STDIN_READS:
            name, args = args[0], args[1:]

            def fn(*a):
                return _tests_stdin(name, *a)
        elif type(fid) is int and fid in _CALLBACKS:
            fn = _CALLBACKS[fid]
        else:
            raise _ProtocolError("a call of a function the tests never passed")
        if type(msg.get("out")) is str:  # what the program printed before the call
            sys.stdout.write(msg["out"][:1 << 20])
        try:
            args = [_dec(a, self) for a in args]
            kwargs = {k: _dec(v, self) for k, v in kw if type(k) is str}
        except (_ProtocolError, ValueError, TypeError, RecursionError, UnicodeDecodeError, ArithmeticError) as exc:
            raise UnreceivableValue(f"the program called the tests' function with a value the tests cannot "
                                    f"receive ({exc})"[:1000]) from None
        try:
            rep = {"ret": self.enc(fn(*args, **kwargs))}
            # A list/dict/set argument the tests' function changed in place goes back (by value),
            # as the program's changes to the tests' arguments come here (``_mirror``).
            mut = _changed([*args, *kwargs.values()], [*msg["args"], *(w for k, w in kw if type(k) is str)],
                           self.enc)
            if mut:
                rep["mut"] = mut
        except _WorkerLost:
            raise
        except Exception as exc:  # noqa: BLE001 - the tests' function raised: the program sees it raise
            try:
                text = str(exc)[:1000]
            except Exception:  # noqa: BLE001
                text = type(exc).__name__
            rep = {"exc": _builtin_name(type(exc)), "msg": text}
            try:
                rep["args"] = self.enc(exc.args)  # KeyError('k') keeps ('k',), not its text
            except Exception:  # noqa: BLE001 - arguments that are not data: the text alone
                pass
            if type(exc).__module__ != "builtins":
                # the tests' own class: if it comes back out of the program, the tests get this very
                # exception again (``except Stop`` catches it), as when one process ran both
                if len(self.raised_here) < 4096:
                    # valid once, for the reply to the request the program is answering now: a token
                    # kept and raised in a later call would pass ``except Found`` for a program
                    # that never made the tests' function raise (red team, 2026-11-29)
                    tok = int.from_bytes(os.urandom(7), "little") or 1
                    self.raised_here[tok] = (exc, self.waiting[-1] if self.waiting else None)
                    rep["tok"] = tok
        rep["n"] = msg.get("n")
        _emit(self.wfd, rep)

    def abort(self, msg):
        """Tell the worker that the tests' function it called (``msg``) will not answer: the
        program's request unwinds (``_Aborted``) and answers a request nobody waits for."""
        try:
            _emit(self.wfd, {"abort": True, "n": msg.get("n")})
        except OSError:
            pass

    def take(self, ref, n):
        """Up to ``n`` items of the worker's iterator ``ref``: (items, whether it is exhausted)."""
        items, end = self.request({"op": "take", "ref": ref, "n": n}, with_end=True)
        if type(items) is not list:
            raise UnreceivableValue("the program's iterator answered with something that is not its items")
        return items, end

    def next_item(self, ref):
        """``next()`` of the worker's iterator ``ref``, through its buffer (items taken ahead by
        ``stream`` are handed out first, so a generator is never seen to skip)."""
        st = self.streams.setdefault(ref, [[], False, 1])
        if not st[0] and not st[1]:
            st[0], st[1] = self.take(ref, 1)
        if st[0]:
            return st[0].pop(0)
        raise StopIteration

    def stream(self, ref):
        """The items of the worker's iterator ``ref`` as the tests take them, fetched in chunks of
        1, 2, 4 ... 1,024 (an infinite generator under islice or zip gives what is asked, a long
        list costs few round trips)."""
        st = self.streams.setdefault(ref, [[], False, 1])
        while True:
            if not st[0]:
                if st[1]:
                    return
                st[0], st[1] = self.take(ref, st[2])
                st[2] = min(st[2] * 2, 1024)
                if not st[0]:
                    return
            yield st[0].pop(0)

    def request(self, req, mutable=(), with_end=False):
        """Send ``req`` and return the program's answer (raise what it raised); ``mutable``: the
        tests' arguments the program may have changed in place; ``with_end``: return (answer,
        whether the iterator it was taken from is exhausted)."""
        if self.lost:
            raise _WorkerLost(self.lost)
        rid = int.from_bytes(os.urandom(8), "little") >> 2  # (``secrets`` costs 10+ ms to import)
        req["id"] = rid
        if self.deadline is not None:
            req["budget"] = max(0.001, self.deadline - _clock())
        _emit(self.wfd, req)
        self.waiting.append(rid)
        try:
            while True:
                if rid in self.early:  # read while a request nested in this one waited
                    rep = self.early.pop(rid)
                    break
                try:
                    rep = _loads(self._line())
                except _CaseTimeout:
                    self.abandoned.add(rid)  # its reply, when it comes, answers nothing
                    raise
                if type(rep) is dict and "cb" in rep and "id" not in rep:
                    # the program called a function of the tests' while answering
                    try:
                        self.answer(rep)
                    except (_WorkerLost, _ProtocolError):
                        raise
                    except _BaseException:  # noqa: B902 - the case ends in it (its timeout, ...)
                        self.abandoned.add(rid)
                        self.abort(rep)  # the program waits on the tests' function: unblock it
                        raise
                    continue
                if type(rep) is dict and type(rep.get("id")) is int and rep["id"] in self.abandoned:
                    self.abandoned.discard(rep["id"])
                    continue
                if type(rep) is dict and type(rep.get("id")) is int and rep["id"] != rid \
                        and rep["id"] in self.waiting and rep["id"] not in self.early:
                    # an outer request's reply: program threads answer in their own order (a thread
                    # pool calling back into the tests, which call the program again)
                    self.early[rep["id"]] = rep
                    continue
                break
            if type(rep) is not dict or rep.get("id") != rid:
                raise _ProtocolError("a reply that does not answer the request")
            if type(rep.get("out")) is str:  # what the program printed meanwhile: the tests' stdout
                sys.stdout.write(rep["out"][:1 << 20])
        except _TooBig:
            raise
        except (_ProtocolError, ValueError, TypeError, RecursionError, UnicodeDecodeError, ArithmeticError) as exc:
            self.lost = f"the program's process broke the protocol ({type(exc).__name__}: {exc})"[:500]
            raise _WorkerLost(self.lost) from None
        finally:
            self.waiting.pop()
        # The reply answers this request: a value in it that cannot be rebuilt here fails this
        # call (and so its case), never the run.
        try:
            if "raise" in rep:
                name, msg, kind = rep.get("raise"), rep.get("msg"), rep.get("kind")
                if type(name) is not str or type(msg) is not str:
                    raise _ProtocolError("malformed exception")
                try:
                    args = _dec(rep["args"], self) if "args" in rep else None
                except (_ProtocolError, ValueError, TypeError, RecursionError, UnicodeDecodeError, ArithmeticError):
                    args = None  # the exception arrives with its message alone
                value, raised = None, (name, msg[:1000], kind, args if type(args) is tuple else None)
            else:
                value, raised = _dec(rep.get("v"), self), None
                # A list/dict/set argument the program changed in place: mirror it, by value.
                _mirror_changes(mutable, rep.get("mut"), lambda new: _dec(new, self))
        except (_ProtocolError, ValueError, TypeError, RecursionError, UnicodeDecodeError, ArithmeticError) as exc:
            raise UnreceivableValue(f"the program answered with a value the tests cannot receive ({exc})"[:1000]) \
                from None
        if raised is None:
            return (value, rep.get("end") is True) if with_end else value
        name, msg, kind, args = raised
        own = self.raised_here.pop(rep.get("tok"), None) if type(rep.get("tok")) is int else None
        if own is not None and own[1] == rid and kind != "timeout":
            raise own[0]  # the tests' exception, raised by their function, come back through the program
        text = msg.split(": ", 1)[1] if msg.startswith(name + ": ") else msg
        if kind == "timeout":
            raise _CaseTimeout(text)
        if name == "StopIteration" and req["op"] == "next":
            raise StopIteration  # the iterator protocol the tests asked for (nowhere else: _EXC)
        cls = _EXC.get(name)
        if cls is None:
            raise _ProgramError(msg)
        chain = rep.get("cls")
        if type(chain) is list and chain and all(type(q) is str and q for q in chain[:20]):
            # the program's own class: the judge's stand-in for it (a subclass of ``cls``), so the
            # tests catch it by class and read its fields and its text
            cls = self.stand_in(chain[:20], name)
        exc = None
        if args is not None:
            try:
                exc = cls(*args)
            except Exception:  # noqa: BLE001 - a class that wants other arguments: the message only
                exc = None
        exc = exc if exc is not None else cls(text)
        if cls not in _EXC.values():
            if type(rep.get("text")) is str:
                exc._program_text = rep["text"]
            fields = rep.get("fields")
            for k, v in (fields.items() if type(fields) is dict else ()):
                if type(k) is str and k.isidentifier() and not k.startswith("__"):
                    try:
                        setattr(exc, k, _dec(v, self))
                    except (_ProtocolError, ValueError, TypeError, RecursionError, ArithmeticError):
                        pass
        raise exc

    def stand_in(self, chain, ancestor):
        """The judge's class for the program's exception class ``chain[0]`` (qualified names, most
        specific first): a subclass of the stand-in of ``chain[1]``, ..., down to the builtin
        ``ancestor``. Made once per name; the program's names for its classes are bound to them."""
        base = _EXC.get(ancestor, Exception)
        cls = base
        for qual in reversed(chain):
            known = self.exc_classes.get(qual)
            if known is None:
                if len(self.exc_classes) >= 256:
                    break
                known = self.exc_classes[qual] = type(qual.rsplit(".", 1)[-1], (cls,), {
                    "__module__": "__program__", "__qualname__": qual, "__str__": _stand_in_str})
            cls = known
        return cls

    def drain(self):
        """Wait for the replies of requests abandoned at a case timeout (the worker answers them
        in order, after finishing them), so the next case's clock starts on an idle worker, as
        it did when one process ran both."""
        for rid in [r for r in self.abandoned if r in self.early]:  # came early, already read
            self.abandoned.discard(rid)
        self.early.clear()
        while self.abandoned and not self.lost:
            try:
                rep = _loads(self._line())
            except _WorkerLost:
                return
            except (ValueError, RecursionError, MemoryError):
                self.lost = "the program's process broke the protocol (a malformed reply)"
                return
            if type(rep) is dict and type(rep.get("id")) is int and rep["id"] in self.abandoned:
                self.abandoned.discard(rep["id"])
            elif type(rep) is dict and "cb" in rep and "id" not in rep:
                self.abort(rep)  # the case that passed the function has ended: no test code runs now
            else:
                self.lost = "the program's process broke the protocol (a reply nobody asked for)"

    def enc(self, v):
        return _enc_arg(v)

    def call(self, remote, args, kwargs):
        enc = [_enc_arg(a) for a in args]
        kw = [[k, _enc_arg(v)] for k, v in kwargs.items()]
        return self.request({"op": "call", "ref": object.__getattribute__(remote, "_ref"), "args": enc, "kw": kw},
                            mutable=(*args, *kwargs.values()))


_STDIN_READS = frozenset(p + n for p in ("", "buffer.") for n in ("read", "readline", "readlines"))


def _tests_stdin(name, *args):
    """The program's ``sys.stdin.<name>(*args)`` (``read``, ``buffer.readline``...) on the tests'
    ``sys.stdin`` as it is now (``mock.patch``): an ``io.StringIO`` without ``buffer`` raises
    AttributeError in the program, where its fallback can catch it."""
    obj = sys.stdin
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj(*args)


def _tests_input(*args):
    """The program's ``input()``: the tests' own, looked up at each call (``mock.patch`` replaces
    it; unpatched, it reads the judge's stdin, which is at EOF, as the program's was)."""
    return builtins.input(*args)


def _forward_seed(rpc):
    """``random.seed(s)`` in the tests seeds the program's ``random`` too (a test that seeds, calls
    the program and replays the draws, as when one process ran both). Seeds that are not data
    stay in the judge."""
    import random

    own = random.seed

    def seed(a=None, version=2):
        own(a, version)
        if a is None or type(a) in (int, str, bytes, bytearray, float):
            rpc.request({"op": "seed", "ref": 0, "a": _enc_arg(a)})

    random.seed = seed


def _stand_in_str(self):
    """A stand-in's text: the program's own ``str()`` of the exception, when it sent one."""
    text = self.__dict__.get("_program_text")
    if type(text) is str:
        return text
    base = next(c for c in type(self).__mro__ if c.__module__ == "builtins")
    return base.__str__(self)


def _mirror(old, new, depth=0):
    """Make ``old`` equal ``new`` in place: the tests' argument the program changed (judge side),
    or the program's argument the tests' function changed (worker side, ``_Channel``); nested
    lists/dicts at the same places are updated in place too, so a row held keeps its identity."""
    if type(new) is not type(old) and not (type(old) is bytearray and type(new) is bytes):
        raise _ProtocolError("an argument changed type")
    if type(old) is set:
        old.clear()
        old.update(new)
    elif type(old) is dict:
        for k in [k for k in old if k not in new]:
            del old[k]
        for k, v in new.items():
            if k in old and type(old[k]) in (list, dict) and type(v) is type(old[k]) and depth < _MAX_DEPTH:
                _mirror(old[k], v, depth + 1)
            elif k not in old or not _same(old[k], v):
                old[k] = v
    elif type(old) is list and len(old) == len(new):
        for i, v in enumerate(new):
            if type(old[i]) in (list, dict) and type(v) is type(old[i]) and depth < _MAX_DEPTH:
                _mirror(old[i], v, depth + 1)
            elif not _same(old[i], v):
                old[i] = v
    else:
        old[:] = new


def _mirror_changes(given, changes, dec):
    """Apply ``changes`` (``_changed``'s ``[i, wire form]`` pairs, from the other process) to the
    arguments ``given``, each decoded by ``dec``: only lists, dicts, sets and bytearrays, by index."""
    for i, new in changes or ():
        if type(i) is int and 0 <= i < len(given) and type(given[i]) in (list, dict, set, bytearray):
            _mirror(given[i], dec(new))


def _describe_soon(rpc, exc, source=""):
    """``_describe(exc)`` for a case or the preamble that has ended: its text may ask the program
    (an assert's message that is the program's object), so within a second of its own, not the
    case's clock, which has stopped; the class's name when it cannot be had."""
    rpc.deadline = _clock() + 1.0
    try:
        return _describe(exc, source)
    except _BaseException:  # noqa: B902
        return type(exc).__name__[:100]
    finally:
        rpc.deadline = None


def _same(a, b):
    """Whether ``a`` may stay where ``b`` came back: equal, and not a number of another type. An
    element the call did not change keeps its own class (a namedtuple, a bytearray), which the
    wire form does not carry (red team, 2026-11-29). Never asks the program: a handle is never
    the same."""
    if isinstance(a, _Remote) or isinstance(b, _Remote):
        return False
    if type(a) is not type(b) and (type(a) in (bool, int, float, complex) or type(b) in (bool, int, float, complex)):
        return False
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001
        return False


def _lock_down_judge(job, enforced):
    """The judge runs trusted test code on untrusted data: rlimits, Landlock without any write,
    not dumpable (no ptrace or /proc/<pid>/mem by the worker's uid), and, run as root, no
    capability left (uid 0 stays, so the worker's uid cannot signal it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    lim = job["limits"]
    _limits(lim, enforced, memory_bytes=max(lim["memory_bytes"], 1 << 30) + (256 << 20) if lim["memory_bytes"] else 0)
    if job["landlock"] and sys.platform.startswith("linux"):
        try:
            _landlock(job.get("shared"), enforced)  # writes only beneath the run's shared temp dir
        except (OSError, AttributeError):
            pass
    if os.geteuid() == 0:
        _set_caps(libc, 0)


def _share_temp_dir(shared):
    """The tests' ``tempfile`` makes its files and directories in the run's shared dir, readable
    and writable by the program's uid too (the judge is uid 0 without capabilities, the worker a
    uid of its own): a test that writes a file for the program, or reads one it wrote, works."""
    import tempfile

    os.umask(0)
    tempfile.tempdir = shared
    make_dir = tempfile.mkdtemp

    def mkdtemp(*args, **kwargs):
        path = make_dir(*args, **kwargs)
        os.chmod(path, 0o777)
        return path

    tempfile.mkdtemp = mkdtemp
    inner = getattr(tempfile, "_mkstemp_inner", None)
    if inner is not None:  # mkstemp and NamedTemporaryFile make their files 0600

        def mkstemp_inner(*args, **kwargs):
            fd, name = inner(*args, **kwargs)
            os.chmod(name, 0o666)
            return fd, name

        tempfile._mkstemp_inner = mkstemp_inner


def _judge(job, tests, rpc_w, rpc_r, out):
    """Run every case in this (trusted) process; the program's names are proxies into the worker."""
    enforced = []
    _lock_down_judge(job, enforced)
    rpc = _Rpc(rpc_w, rpc_r)
    try:
        hello = rpc.first()
    except _WorkerLost as exc:
        _emit(out, {"ev": "lost", "at": 0, "why": str(exc)})
        os._exit(_JUDGE_LOST)
    # The worker says which of its layers took (only it can tell for Landlock): names it could
    # claim are limited to the layers that exist.
    worker_layers = [e for e in hello.get("enforced", ()) if type(e) is str and _LAYER.fullmatch(e)] \
        if type(hello) is dict and type(hello.get("enforced")) is list else []
    _emit(out, {"ev": "start", "enforced": worker_layers})
    if type(hello) is not dict or "load" not in hello or hello["load"] is not None:
        msg = hello.get("load") if type(hello) is dict and type(hello.get("load")) is str else "malformed"
        kind = hello.get("kind") if type(hello) is dict and hello.get("kind") in ("memory", "error") else "error"
        _emit(out, {"ev": "load", "error": msg[:1000], "kind": kind})
        os._exit(0)
    g = {"__name__": "__tests__", "__builtins__": builtins}
    names = hello.get("names")
    if type(names) is not dict:
        names = {}
    import importlib

    entry = tests["entry_point"]
    sources = tests["preamble"] + "".join(c["setup"] + c["source"] for c in tests["cases"])
    for name, d in list(names.items())[:10000]:
        if type(name) is not str or not name.isidentifier() or name.startswith("__") or type(d) is not dict:
            continue
        # The program's names must not stand in for the tests' own: a program ``abs`` or ``range``
        # (or a ``math`` whose ``isclose`` is always true) would decide the comparison. Builtins'
        # names are skipped (but for the entry point), and a standard module's name is bound only
        # to the judge's own copy of that very module.
        if name in _BUILTIN_NAMES and name != entry:
            continue
        if name in sys.stdlib_module_names and d.get("mod") != name and (name != entry and name + "." in sources):
            continue  # the tests use ``name.attr``: the program's object must not stand in for the module
        try:
            if "mod" in d:
                mod = d["mod"]
                if type(mod) is str and mod in _TEST_MODULES:
                    g[name] = importlib.import_module(mod)
            elif "v" in d:
                g[name] = _dec(d["v"], rpc)
            elif type(d.get("exc")) is list and len(d["exc"]) == 2 and all(type(x) is str for x in d["exc"]):
                g[name] = rpc.stand_in([d["exc"][0]], d["exc"][1])  # caught by class, read by field
            elif type(d.get("H")) is int:
                g[name] = _Remote(rpc, d["H"], str(d.get("t", ""))[:100])
        except (ImportError, _ProtocolError, ValueError, TypeError, RecursionError, ArithmeticError):
            continue
    del hello, names  # the worker's greeting may be large: only what was bound above is kept
    load_error = None
    try:
        if entry:
            if entry not in g:
                raise NameError(f"the program does not define the entry point {entry!r}")
            g["candidate"] = g[entry]
        if tests["preamble"]:
            _exec(_compile(tests["preamble"], "<tests>", "exec"), g)
    except _BaseException as exc:  # noqa: B902
        load_error = _describe_soon(rpc, exc)
    if load_error is not None:
        _emit(out, {"ev": "load", "error": load_error, "kind": "error"})
        os._exit(0)
    _emit(out, {"ev": "load", "error": None})
    # Only for tests that name them: importing random or tempfile costs every run several ms.
    if "random" in sources:
        _forward_seed(rpc)
    if job.get("shared") and "temp" in sources:
        _share_temp_dir(job["shared"])
    case_timeout = tests["case_timeout"]

    def on_alarm(signum, frame):
        raise _CaseTimeout(f"the test case ran longer than {case_timeout} s")

    if case_timeout:
        signal.signal(signal.SIGALRM, on_alarm)
    for i, case in enumerate(tests["cases"]):
        rpc.drain()
        if rpc.lost:
            _emit(out, {"ev": "lost", "at": i, "why": rpc.lost})
            os._exit(_JUDGE_LOST)
        ns = dict(g)
        t = _clock()
        error = kind = None
        rpc.program_decided = False
        try:
            try:
                if case_timeout:
                    rpc.deadline = t + case_timeout
                    signal.setitimer(signal.ITIMER_REAL, case_timeout + 0.5)  # the judge's own code
                if case["setup"]:
                    _exec(_compile(case["setup"], "<tests>", "exec"), ns)
                _exec(_compile(case["source"], "<tests>", "exec"), ns)
            finally:
                rpc.deadline = None
                if case_timeout:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except _WorkerLost as exc:
            error, kind = f"not run to the end: {exc}", "lost"
        except _BaseException as exc:  # noqa: B902
            error, kind = _describe_soon(rpc, exc, case["source"]), _kind(exc)
        if rpc.lost and kind != "lost":
            error, kind = f"not run to the end: {rpc.lost}", "lost"
        _emit(out, {"ev": "case", "i": i, "ok": error is None, "error": error, "kind": kind, "t": _clock() - t,
                    "program": rpc.program_decided})
    if rpc.lost:  # the program died (or broke the protocol) during the last case: a crash, not a done run
        _emit(out, {"ev": "lost", "at": len(tests["cases"]), "why": rpc.lost})
        os._exit(_JUDGE_LOST)
    _emit(out, {"ev": "done"})
    os._exit(0)
