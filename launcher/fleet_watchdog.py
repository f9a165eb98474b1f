"""Stops a local fleet's processes when the process that started them dies, however it dies.

:class:`launcher.local_fleet.LocalFleet` starts one of these per fleet, in a session of its own,
and writes ``+<pgid>`` to its stdin for each process group it starts and ``-<pgid>`` for each it
has stopped. The pipe's write end is held by the fleet's process alone, so end of file means
that process is gone (a SIGKILL, a test run's timeout, a crash) or has stopped its fleet: every
group still listed gets SIGTERM, then SIGKILL after ``GRACE_S``. Standard library only: it
starts in a few tens of milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

GRACE_S = 3.0


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal(groups: set[int], signum: int) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


def stop_groups(groups: set[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM every group; SIGKILL those with a process left after ``grace_s``."""
    _signal(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := {group for group in groups if _alive(group)}) and time.monotonic() < deadline:
        time.sleep(0.05)  # another session's group: nothing to wait on but its members' exit
    _signal(left, signal.SIGKILL)


def main() -> None:
    # Ctrl-C in the fleet's terminal is the fleet process's to handle, not this one's.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    groups: set[int] = set()
    for line in sys.stdin:
        change, group = line[:1], int(line[1:])
        if change == "+":
            groups.add(group)
        else:
            groups.discard(group)
    stop_groups(groups)


if __name__ == "__main__":
    main()
