"""Polling for a condition that another process makes true (a scheduler's file, a checkpointed tile)."""

import time


def wait_for(cond, seconds: float, what: str) -> None:
    """Return once `cond()` is true; fail the test naming `what` after `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
