"""Leaving the process once a command is over, without Python's slow tear-down of torch.

After a command has finished, Python's own shutdown of a process that imported torch takes 0.4-0.6 s (freeing
every module and torch's C++ state), after the summary is printed: the terminal waits for nothing, and a script
calling ``sst`` once per file pays it each time. Everything a command writes is closed by the command itself;
what is left to do at exit is the ``atexit`` work (temporary folders, logging, multiprocessing children) and
flushing the standard streams, which this does before ending the process at once.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading


def exit_code_of(code: object) -> int:
    """The process exit status ``sys.exit(code)`` would give (None is 0; a message is 1, printed by the caller)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


def can_end_at_once() -> bool:
    """Only when torch was imported (without it the tear-down is quick) and no other thread still runs: Python's
    shutdown would wait for a non-daemon thread, and this must never cut one short."""
    if "torch" not in sys.modules:
        return False
    return all(thread is threading.main_thread() or thread.daemon for thread in threading.enumerate())


def end_process(code: object) -> None:
    """Run the ``atexit`` work, flush stdout and stderr, and end the process with ``code``'s status at once; when
    that is unsafe, or flushing fails (a closed pipe), return and let Python's own shutdown do it."""
    if not can_end_at_once():
        return
    if isinstance(code, str):  # sys.exit("message") prints it; keep that
        print(code, file=sys.stderr)
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(exit_code_of(code))
