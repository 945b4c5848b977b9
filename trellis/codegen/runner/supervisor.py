# Names used but not defined here come from the earlier parts of the one script (runner/__init__.py).
"""Runner part (last): the supervisor, ``main``, the entry point of the child's one script (``seccomp.py``
+ the parts ``runner/__init__.py`` lists), compiled by the parent and run by ``python -I -S`` (the
parent's ``sandbox_child.STUB``; another interpreter gets the text with ``-c``).

Stdlib only and never imported by trellis. Three processes, so that the verdict is never decided
where the untrusted program runs:

- *main* (the supervisor, unrestricted) reads frame 1 from stdin (the program, the limits, the
  work dir) and forks the **worker**; only then reads frame 2 (the test code) and forks the
  **judge**. It reports how the worker ended (signal, exit status, CPU time), enforces the run-wide
  memory and process limits over the worker's whole process tree (it is a child subreaper, so
  daemons that ``setsid`` and double-fork stay its descendants), and kills that tree when the
  judge is done, when the worker exits, or when the parent closes stdin (its stop signal).
- the **worker** locks itself down (rlimits, Landlock, seccomp, a per-run uid, a socket shim),
  runs the program and then answers the judge's requests: call this function with these values,
  read this attribute. It returns *data*: values of exact builtin types (``None``, ``bool``,
  ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``,
  ``frozenset``) encoded as JSON; anything else becomes an opaque handle. It was forked before the
  test code was read, so the tests and their expected values were never in its memory, and it has
  no descriptor of the result pipe.
- the **judge** runs the test code (trusted) with the program's names bound to proxies. Decoded
  values are rebuilt as plain builtins by the judge's own code, so an ``__eq__`` that is always
  true, a patched ``abs`` or a rewritten assert inside the program cannot reach the comparison.
  Handles cannot be compared, hashed or truth-tested (that would ask the program). It writes one
  event per case to the result pipe.

What the program can still do: answer with the right value when it can compute or guess it from
what it sees (the arguments of each call), and fake a test whose expected value is computed by a
function of the program itself (HumanEval/32 checks ``poly(xs, candidate(xs))`` with the
program's ``poly``). The program's stdout is discarded; its stderr is kept for the report.
"""

# ------------------------------------------------------------------------------------------- main
def _children(pid):
    """Direct children of ``pid`` (all its threads'), from /proc; [] where unreadable."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except (OSError, ValueError):
        pass
    return out


def _tree(roots):
    """Every process below ``roots`` (roots included) that is still alive."""
    seen, stack = set(), list(roots)
    while stack and len(seen) < 100000:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        stack.extend(_children(p))
    return seen


def _resident(pid):
    """(resident bytes, page-table bytes) of ``pid`` from /proc/<pid>/status: counters the kernel
    keeps, read in O(1) however many mappings the process has (0, 0 where unreadable)."""
    rss = pte = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) << 10
                elif line.startswith("VmPTE:"):
                    pte = int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return rss, pte


def _pss(pid):
    """Proportional set size (shared pages split among their users, so forked copies of one
    interpreter are not counted N times) from smaps_rollup; None where unreadable. Its cost grows
    with the process's mappings (~50 ms for 30,000)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) << 10
    except (OSError, ValueError, IndexError):
        pass
    return None


_PSS_BUDGET = 0.01  # seconds of smaps reading per accounting pass


def _over_memory(pids, limit):
    """Whether ``pids`` together hold more than ``limit`` bytes of memory plus page tables (60,000
    mappings of one page cost 2 GB of page tables, found by a red-team pass). Resident size, an
    upper bound of the proportional one, comes first and settles most passes; only above the limit
    is PSS read, largest process first, for at most ``_PSS_BUDGET`` seconds a pass. A process not
    read in time counts at its resident size, so mappings that make smaps slow to read only get
    the run killed sooner (16 processes of 30,000 mappings each once held 2.5 GB against 320 MB
    while each pass read ~0.8 s of smaps)."""
    sizes = {p: _resident(p) for p in pids}
    total = sum(r + t for r, t in sizes.values())
    if total <= limit:
        return False
    until = _clock() + _PSS_BUDGET
    for p in sorted(sizes, key=lambda q: -sizes[q][0]):
        if _clock() > until:
            break
        pss = _pss(p)
        if pss is not None and pss < sizes[p][0]:
            total -= sizes[p][0] - pss
            if total <= limit:
                return False
    return total > limit


def _under_oom(memcg):
    """Whether the run's v1 memory cgroup sits at its limit (its OOM killer is off: the process that
    hit it waits in its allocation until this supervisor kills the run)."""
    try:
        with open(os.path.join(memcg, "memory.oom_control")) as f:
            return any(line.split() == ["under_oom", "1"] for line in f)
    except OSError:
        return False


def _disk_usage(root, max_entries, pids=()):
    """(bytes allocated, entries) under ``root``, never following symlinks, without recursion
    (stops counting entries past ``max_entries``), plus the regular files that processes ``pids``
    hold open after unlinking them (they take disk no directory shows)."""
    total = n = 0
    seen = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if st.st_nlink == 0 and (st.st_mode & 0o170000) == 0o100000 and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        # ... and files kept only by a mapping (the descriptor closed after mmap)
        try:
            with open(f"/proc/{pid}/maps") as f:
                spans = [line.split()[0] for line in f if line.rstrip().endswith("(deleted)")]
        except OSError:
            spans = []
        for span in spans:
            try:
                st = os.stat(f"/proc/{pid}/map_files/{span}")
            except OSError:
                continue
            if (st.st_mode & 0o170000) == 0o100000 and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    stack = [root]
    while stack and n <= max_entries:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    n += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
        except OSError:
            continue
    return total, n


def _mount_tmpfs(job):
    """A size- and inode-capped tmpfs on the work dir, in this run's mount namespace: the run's
    files live there, count against one disk limit, and vanish with the namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid = job["run_uid"] if job["run_uid"] is not None else 0
    opts = (f"size={job['limits']['disk_bytes']},nr_inodes={job['limits']['inodes']},mode=0700,"
            f"uid={uid},gid={uid}").encode()
    flags = 2 | 4 | 8  # MS_NOSUID | MS_NODEV | MS_NOEXEC
    rc = libc.mount(b"tmpfs", job["workdir"].encode(), b"tmpfs", ctypes.c_ulong(flags), opts)
    return rc == 0


def _parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _kill_all(pids):
    """SIGKILL ``pids`` (read from /proc a moment ago) through pidfds, each after checking that the
    process behind the pidfd is still a child of the tree (or of us): a pid the program freed could
    have been reused by a process outside the run in between."""
    me = os.getpid()
    tree = set(pids) | {me}
    for p in pids:
        if p == me:
            continue
        try:
            fd = os.pidfd_open(p)
        except (OSError, AttributeError):
            continue
        try:
            if _parent_of(p) in tree:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def _kill_cgroup(path, check):
    """SIGKILL every process in the v1 cgroup ``path`` through pidfds; with ``check`` (/proc is this
    namespace's) only those /proc still shows in it, as a freed pid could name another process."""
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return
    for p in pids:
        try:
            fd = os.pidfd_open(p)
        except (OSError, AttributeError):
            continue
        try:
            if check:
                with open(f"/proc/{p}/cgroup") as f:
                    if "/" + os.path.basename(path) not in f.read():
                        continue
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os.close(fd)


def _enter(cgroups):
    """Join the run's cgroup v1 directories ({controller: path}, ``sandbox_host.RunCgroups``) so that
    the worker forked next is born in them, its whole process tree held by the kernel's limits
    from its first instruction. Returns {controller: path} of those joined."""
    joined = {}
    for controller, path in sorted(cgroups.items()):
        try:
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            joined[controller] = path
        except OSError:
            pass
    return joined


def _leave(joined):
    """Back to the parent cgroups (where this process came from) after forking the worker."""
    for path in joined.values():
        try:
            with open(os.path.join(os.path.dirname(path), "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass


def main():
    """Supervise one run (module docstring)."""
    job = _read_frame(0)
    out = job["fd"]
    # values nest up to _MAX_DEPTH (each level is two frames of _enc/_dec), in both children
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * _MAX_DEPTH + 1000))
    # Started with -S (site's .pth processing cost ~25 ms a run): the interpreter's package
    # directories are added as they are, so the program can import what is installed there.
    sys.path.extend(p for p in job.get("site", ()) if p not in sys.path)
    layers = []
    if job.get("cgroup"):
        try:  # before any fork: every process of the run is born in the run's cgroup
            with open(os.path.join(job["cgroup"], "cgroup.procs"), "w") as f:
                f.write("0")
            layers.extend(job["cgroup_layers"])
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans of the program stay our descendants
    libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE (inherited): no 2 MB page for one pinned 4 KB
    if job["mountns"] and _mount_tmpfs(job):
        layers.append("tmpfs")
        os.chdir(job["workdir"])  # the old cwd is the directory under the mount
    try:  # the temp dir the tests and the program share (judge.py, _share_temp_dir)
        shared = os.path.join(job["workdir"], "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        os.chmod(job["workdir"], 0o711)  # the judge (uid 0, no capability) passes through to it
        job["shared"] = shared
    except OSError:
        pass
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    born_in = _enter(job.get("worker_cgroups", {}))
    layers.extend(f"cgroup1-{c}" for c in born_in)
    lim = job["limits"]
    if lim["memory_bytes"] and not any(x in layers for x in _MEMORY_CGROUPS):
        # no kernel memory limit on the program: the worker takes a share (worker.py, _lock_down_worker)
        layers.append(f"rlimit-share {lim['share_processes']}x{lim['share_bytes'] >> 20}MB")
    job["joined"] = layers[:]  # what holds the worker, which reads it once forked
    worker = os.fork()
    if worker == 0:
        try:
            # the tests, still unread in the stdin pipe, are out of its reach (the program's
            # input() and sys.stdin are the tests': worker.py, _JudgeStdin)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            for fd in (out, req_w, rep_r):
                os.close(fd)
            _worker(job, req_r, rep_w)
        except _BaseException:  # noqa: B902 - a harness bug: show it on stderr
            import traceback

            traceback.print_exc()
        os._exit(70)
    _leave(born_in)  # the judge and this process stay out of the program's cgroups
    os.close(req_r)
    os.close(rep_w)
    tests = _read_frame(0)  # only now: the worker was forked without the tests in memory
    judge = os.fork()
    if judge == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            _judge(job, tests, req_w, rep_r, out)
        except _BaseException:  # noqa: B902
            import traceback

            traceback.print_exc()
        os._exit(70)
    os.close(req_w)
    os.close(rep_r)
    del tests
    # The process tree is read from /proc: only where /proc is this PID namespace's (or the host's,
    # without a namespace). Under ``unshare --pid`` without ``--mount-proc`` /proc is the host's,
    # where our pid names another process: no accounting then (the namespace still kills all).
    try:
        tree_ok = os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        tree_ok = False
    if tree_ok:
        layers.append("run-limits")
    _emit(out, {"ev": "main", "layers": layers})
    memcg = born_in.get("memory")
    worker_alive = judge_alive = True
    judge_status = None
    over = None
    tick = 0
    # Exits wake the loop at once (pidfds); otherwise it accounts every 20 ms.
    wake = [0]
    for pid in (worker, judge):
        try:
            wake.append(os.pidfd_open(pid))
        except (OSError, AttributeError):
            pass
    while judge_alive:
        tick += 1
        ready, _, _ = select.select(wake, [], [], 0.02)
        if 0 in ready and not os.read(0, 64):  # the parent's stop
            break
        for fd in ready:
            if fd != 0 and fd in wake:
                wake.remove(fd)  # an exited child's pidfd stays readable: select on it no more
                os.close(fd)
        if worker_alive:
            done, status, usage = os.wait4(worker, os.WNOHANG)
            if done:
                worker_alive = False
                _emit_exit(out, status, usage, over)
        done, judge_status = os.waitpid(judge, os.WNOHANG)
        if done:
            judge_alive = False
            if os.WIFSIGNALED(judge_status):  # the test side died: not the program's exit to report
                _emit(out, {"ev": "judge", "signal": os.WTERMSIG(judge_status)})
        else:
            judge_status = None
        _reap(keep=[p for p, alive in ((worker, worker_alive), (judge, judge_alive)) if alive])
        if over is None and memcg and _under_oom(memcg):
            over = "memory"  # the kernel stopped it at the limit: all of it goes, whatever /proc shows
            _kill_cgroup(memcg, tree_ok)
        if not tree_ok:
            continue
        tree = _tree([c for c in _children(os.getpid()) if c != judge])
        if not worker_alive and tree:
            _kill_all(tree)  # the program is over: its leftovers go (and release the reply pipe)
            continue
        # The judge counts too: what it holds is mostly what the program sent it.
        if over is None and lim["memory_bytes"] and _over_memory(tree | {judge}, lim["memory_bytes"] + _JUDGE_BASE):
            over = "memory"
        elif over is None and len(tree) > lim["processes"] + 1:
            over = "processes"
        elif over is None and "tmpfs" not in layers and tick % 5 == 0:
            # No tmpfs of its own (no mount namespace): the run's files are counted every 0.1 s.
            used, entries = _disk_usage(job["workdir"], lim["inodes"], tree)
            if used > lim["disk_bytes"] or entries > lim["inodes"]:
                over = "disk"
        if over is not None:
            _kill_all(tree)
    if worker_alive and judge_status is not None and os.WIFEXITED(judge_status) \
            and os.WEXITSTATUS(judge_status) == _JUDGE_LOST:
        # The judge saw the worker's pipe close (an exit closes descriptors first) a moment before
        # the worker became a zombie: give its exit status a moment to arrive.
        until = _clock() + 0.5
        while _clock() < until:
            done, status, usage = os.wait4(worker, os.WNOHANG)
            if done:
                _emit_exit(out, status, usage, over)
                break
            time.sleep(0.002)
    # Kill and reap every descendant (orphans come to us: we are their subreaper), so that none is
    # left as a zombie in the parent's process group when we exit.
    deadline = _clock() + 2.0
    while _clock() < deadline:
        if tree_ok:
            _kill_all(_tree(_children(os.getpid())))
        else:
            for p in (worker, judge):  # our own children, not reaped yet: their pids cannot be reused
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        if not _reap(block=True):
            break
    os._exit(0)


def _emit_exit(out, status, usage, over):
    """The worker's end, as only its parent can see it."""
    _emit(out, {"ev": "exit", "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "cpu": usage.ru_utime + usage.ru_stime, "over": over})


def _reap(block=False, keep=()):
    """Collect exited children, except those in ``keep`` (the worker and the judge while the loop
    waits for their own statuses: reaping one here lost its status, and the loop's next wait on it
    raised ChildProcessError, a crashed run about 1 in 6 test-file runs); True while any remains."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG))
        except ChildProcessError:
            return False
        if info is None:
            return True
        if info.si_pid in keep:
            return True  # its own wait collects it (the next pass)
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            pass
        if block:
            return True


if __name__ == "__main__":  # python -c <this text>; never run on import
    main()
