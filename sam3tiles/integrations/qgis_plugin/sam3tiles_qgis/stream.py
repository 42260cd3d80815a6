"""The sam3tiles command line run as a subprocess for the algorithm: its `--progress json` lines streamed to
QGIS's feedback, a cancel terminating it. Imports neither qgis nor sam3tiles (QGIS's Python may have no
sam3tiles; the tests run it without QGIS): the feedback is any object with QgsProcessingFeedback's
`isCanceled`, `setProgress`, `pushInfo` and `reportError`.

Everything it opens is closed whatever happens: the command's output pipe, and the command itself, waited
for (terminated first when the run stops early: a cancel, or an error of the caller's).
"""

import json
import os
import queue
import subprocess
import threading

#: seconds a cancelled command has to clean up before it is killed
GRACE_SECONDS = 30


def run_streamed(cmd, feedback, error=RuntimeError):
    """Run `cmd`; its JSON progress lines -> feedback progress, other lines -> the log. A cancel terminates it
    (then kills it after GRACE_SECONDS). Returns (exit status, the last text lines); a command that cannot
    start raises `error` (the algorithm's QgsProcessingException)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHOME"}  # QGIS's own, not the command's
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, bufsize=1, env=env)
    except OSError as e:
        raise error(f"cannot start {cmd[0]}: {e}: check the sam3tiles command setting") from None
    lines, tail = queue.Queue(), []
    reader = threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        _follow(proc, lines, feedback, tail)
    finally:
        if proc.poll() is None:  # stopped early (a cancel, an error here): the command stops too
            _stop(proc)
        reader.join()
        proc.stdout.close()
    return proc.wait(), tail


def _follow(proc, lines, feedback, tail):
    """Show the command's lines until its output ends; a cancel terminates it."""
    while True:
        if feedback.isCanceled() and proc.poll() is None:
            _stop(proc)
        try:
            line = lines.get(timeout=0.1)
        except queue.Empty:
            continue
        if line is None:
            return
        _show(line, feedback, tail)


def _stop(proc):
    proc.terminate()  # SIGTERM: the command removes its temporary files
    try:
        proc.wait(GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _reader(stream, lines):
    for line in iter(stream.readline, ""):
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _show(line, feedback, tail):
    try:
        event = json.loads(line) if line.startswith("{") else None
    except ValueError:
        event = None
    if isinstance(event, dict) and event.get("event") == "progress":
        feedback.setProgress(float(event.get("percent", 0.0)))
    elif isinstance(event, dict) and event.get("event") == "message":
        feedback.pushInfo(str(event.get("text", "")))
    elif isinstance(event, dict) and event.get("event") == "end":
        feedback.setProgress(100.0)
    elif line.strip():
        tail.append(line)
        (feedback.reportError if line.startswith("Error") else feedback.pushInfo)(line)
