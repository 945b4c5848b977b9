"""The sandbox's child side, kept as parts of one script. In: ``seccomp.py`` and the files ``PARTS``
names, read in that order and joined with a newline by ``sandbox_child.runner_source()`` (once per
process), compiled by ``runner_code()`` and sent marshalled on the child's stdin (``python -I -S``
behind ``sandbox_child.STUB``). Out: the child's result stream, one JSON event a line, read and
checked by ``sandbox_child.collect`` (``supervisor.py`` describes the three processes behind it).
One script, not a package the child imports: the child is isolated from the host's site-packages
and from trellis, so all it runs must come on the wire. The parts share the script's one namespace:
each uses what the earlier ones define (every import is in ``common.py``) and imports none of them.
They are stdlib-only texts, never imported by trellis (alone, most would fail on those names);
``tests/codegen/test_runner_bundle.py`` checks the bundle.
"""

PARTS = ("common.py", "lockdown.py", "values.py", "remote.py", "worker.py", "judge.py", "supervisor.py")
