"""What the sandboxed kernel runs at grading time, in place of the test cells: it hands over plain values.

`kvcourse grade autograde` puts this file's code in a cell of the throw-away copy it grades, and a
call after every answer cell: ``record(question, name)`` writes the answer's value,
``record_calls(question, name, cases)`` the results of the student's function on the test cases, and
``record_lab(question, name, lab, traces)`` the runs of a lab's class on the traces (kvcourse.labs'
record_runs, which replays nothing and judges nothing), as one JSON line each. For labs B and C,
``traces`` is only their number: the feeder (kvcourse.labs.feeder, at ``FEEDER``) holds them, serves
each on the class one question at a time, and hands the grader the log itself. Only None, bools,
ints, floats, strings and short lists of them are handed over; anything else is written as
"unreadable". Nothing here knows a right answer, and nothing it writes is trusted: the instructor's
process reads the lines as JSON, checks them again, replays a lab's runs on the engine and decides
the points (autograde.py, decide.py).
"""

import json
import signal

RESULTS = "results.jsonl"  # set by the injected cell
FEEDER = ""  # the feeder's socket (labs B and C), set by the injected cell
CALL_LIMIT_S = 5.0  # one call of the student's function
LAB_LOG_LIMIT = 1_500_000  # characters of one lab's runs (the reference's are about 60,000)
_MISSING = object()


def _plain(value, depth=0):
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if value.bit_length() <= 256 else {"unreadable": "an integer of more than 77 digits"}
    if kind is float:
        return value if value == value and abs(value) != float("inf") else {"unreadable": repr(value)}
    if kind is str:
        return value if len(value) <= 2000 else {"unreadable": f"a string of {len(value):,} characters"}
    if kind in (list, tuple) and depth < 3 and len(value) <= 100:
        return [_plain(item, depth + 1) for item in value]
    return {"unreadable": f"a {str(kind.__name__)[:40]}, not a plain value"}


def _write(entry):
    with open(RESULTS, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def record(question, name):
    """Hand over the value of the answer variable ``name``."""
    value = globals().get(name, _MISSING)
    _write({"q": question, "value": _plain(value)} if value is not _MISSING else {"q": question, "missing": name})


class _TooLong(Exception):
    pass


def _stop(signum, frame):
    raise _TooLong()


def record_calls(question, name, cases):
    """Hand over what the student's function ``name`` returns for each argument tuple (or what it raised)."""
    func = globals().get(name, _MISSING)
    if func is _MISSING or not callable(func):
        _write({"q": question, "missing": name})
        return
    results = []
    for args in cases:
        previous = signal.signal(signal.SIGALRM, _stop)
        signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
        try:
            results.append({"ok": _plain(func(*args))})
        except _TooLong:
            results.append({"error": f"ran for more than {CALL_LIMIT_S:g} s"})
        except BaseException as err:  # noqa: BLE001 - whatever the student's code raises is its answer
            try:
                results.append({"error": f"{type(err).__name__}: {str(err)[:200]}"})
            except BaseException:  # noqa: BLE001 - an exception whose str() fails
                results.append({"error": "an exception that cannot be shown"})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    _write({"q": question, "calls": results})


def record_lab(question, name, lab, traces):
    """Hand over the runs of the lab's class ``name`` on each trace (plain JSON logs, replayed outside).
    Runs cut short by the time limit of the cell stay in; the traces after them are handed over as stopped."""
    answer = globals().get(name, _MISSING)
    if answer is _MISSING:
        _write({"q": question, "missing": name})
        return
    if isinstance(traces, int):  # labs B and C: the feeder serves them, and its own log is what the grader reads
        try:
            from kvcourse.labs.feeder import feed_all

            feed_all(FEEDER, question, lab, answer, traces)
        except BaseException:  # noqa: BLE001, S110 - what was not served scores as not served, outside
            pass
        _write({"q": question, "fed": traces})
        return
    logs = []
    try:
        from kvcourse.labs import record_runs

        for trace in traces:
            logs += record_runs(lab, answer, [trace])
    except BaseException as err:  # noqa: BLE001 - the time limit of the cell, or SystemExit from the class
        try:
            why = f"the run stopped: {type(err).__name__}: {str(err)[:200]}"
        except BaseException:  # noqa: BLE001 - an exception whose str() fails
            why = "the run stopped"
        logs += [{"entries": [], "beams": [], "error": why}] * (len(traces) - len(logs))
    try:
        text = json.dumps({"q": question, "lab": logs}, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as err:
        text = json.dumps(
            {"q": question, "lab": None, "error": f"the runs' logs are not plain JSON ({type(err).__name__})"}
        )
    if len(text) > LAB_LOG_LIMIT:
        text = json.dumps(
            {
                "q": question,
                "lab": None,
                "error": f"the runs' logs hold {len(text):,} characters, more than {LAB_LOG_LIMIT:,}",
            }
        )
    with open(RESULTS, "a", encoding="utf-8") as f:
        f.write(text + "\n")


def record_missing(questions):
    """At the end: hand over every answer not handed over yet (its cell moved, or was merged into another).
    Each entry is (question, name, detail): a code question's cases, a lab's {"lab", "traces"}, or None."""
    try:
        with open(RESULTS, encoding="utf-8") as f:
            done = {json.loads(line).get("q") for line in f if line.strip()}
    except (OSError, ValueError, AttributeError):
        done = set()
    for question, name, detail in questions:
        if question in done:
            continue
        if isinstance(detail, dict):
            record_lab(question, name, detail["lab"], detail["traces"])
        elif detail:
            record_calls(question, name, detail)
        else:
            record(question, name)
