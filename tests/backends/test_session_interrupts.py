"""An interrupt landing anywhere in a Session's fold leaves no mark behind: a later fold, from
any thread, runs.

A ``KeyboardInterrupt`` (Ctrl-C, a notebook's interrupt, an alarm handler raising) that
landed after the Session marked a set as in the making and before the ``try`` that clears the
mark left it set: every later call needing new constants waited for ever. Here a tracing hook
raises KeyboardInterrupt at each line the Session's own code runs once the mark is set
(``onnxfold/runtime/session.py``; what its callees run raises through those lines), one line
per round, all but the release itself (the first line of the ``finally`` that clears it);
after each round another thread folds a new set, with a bound.

A ``with`` block's exit is no such point: the tracer sees the ``with`` line again before
``__exit__`` runs, and a raise there would leave the lock taken, but a signal is taken only
after that call returns (the lock released), and the Session takes no other kind of
interrupt. The hook raises at every other line.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import threading

import numpy as np

import onnxfold.runtime.session as session_module
from onnxfold.runtime.session import Session
from tests.support import low_rank_models as lr

BOUND = 60.0  # seconds: what a thread waiting for ever would exceed (never reached otherwise)
SOURCE = session_module.__file__
MAX_ROUNDS = 400  # far more lines than a fold runs in the Session's own code


def _with_lines() -> frozenset[int]:
    """The lines of ``session.py`` that open a ``with`` block."""
    with open(SOURCE, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return frozenset(node.lineno for node in ast.walk(tree) if isinstance(node, ast.With))


def _release_line() -> int:
    """The line of ``session.py`` that releases the mark: the first statement of the
    ``finally`` of ``Session._select``'s ``try`` (where the mark is set)."""
    lines, first = inspect.getsourcelines(Session._select)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    tries = [node for node in ast.walk(tree) if isinstance(node, ast.Try) and node.finalbody]
    return first + tries[0].finalbody[0].lineno - 1 if tries else -1  # -1: every line


class _Interrupt:
    """A tracing hook that raises KeyboardInterrupt at the ``at``-th line the Session's code
    runs in this thread once ``session`` has a set marked as in the making (the release line
    aside); ``lines``: how many such lines ran."""

    def __init__(self, session: Session, at: int, release: int, withs: frozenset[int]) -> None:
        self.session, self.at, self.release, self.withs = session, at, release, withs
        self.marked, self.lines = False, 0
        self.open: set[tuple[int, int]] = set()  # (frame, line) of each with block entered

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename != SOURCE:
            return None
        return self.local

    def local(self, frame, event, arg):
        if event != "line":
            return self.local
        self.marked = self.marked or self.session._making is not None
        if frame.f_lineno in self.withs:  # entering the block, or (seen again) leaving it
            block = (id(frame), frame.f_lineno)
            if block in self.open:
                self.open.discard(block)
                return self.local
            self.open.add(block)
        if self.marked and frame.f_lineno != self.release:
            self.lines += 1
            if self.lines == self.at:
                raise KeyboardInterrupt
        return self.local


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    results: dict = {}

    def body():
        try:
            results["value"] = fn()
        except BaseException as e:  # reported by the test
            results["value"] = e
    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, results


def test_after_an_interrupt_at_any_line_of_a_fold_another_thread_folds_again():
    case = lr.scale_after()
    dynamic = {n: a for n, a in case.feeds.items() if n not in case.runtime}
    session = Session(case.model, case.runtime)
    reference = Session(case.model, case.runtime)
    release, withs = _release_line(), _with_lines()
    session.run(None, {**dynamic, **lr.adapter(case, 0)})  # the first fold, untraced
    interrupted = 0
    for at in range(1, MAX_ROUNDS):
        hook = _Interrupt(session, at, release, withs)
        feeds = {**dynamic, **lr.adapter(case, 2 * at)}  # new constants: a new set to make
        sys.settrace(hook)
        try:
            session.run(None, feeds)
            finished = True
        except KeyboardInterrupt:
            finished = False
        finally:
            sys.settrace(None)
        assert hook.marked, "the run made no new set"
        if finished:  # the hook's line is past the last one a fold runs: every one was tried
            assert hook.lines < at
            break
        interrupted += 1
        other = {**dynamic, **lr.adapter(case, 2 * at + 1)}  # another new set, another thread
        thread, results = _in_thread(lambda feeds=other: session.run(None, feeds)[0])
        thread.join(BOUND)
        assert not thread.is_alive(), \
            f"after an interrupt at the Session's line {at} since the mark, a fold hangs"
        assert not isinstance(results["value"], BaseException), results["value"]
        np.testing.assert_allclose(results["value"], reference.run(None, other)[0],
                                   rtol=1e-5, atol=1e-6)
    else:
        raise AssertionError(f"a fold ran more than {MAX_ROUNDS} lines of the Session's code")
    assert interrupted >= 10, f"only {interrupted} lines between the mark and its release"
    # and the interrupted runs' own constants fold too, once asked again
    again = {**dynamic, **lr.adapter(case, 2)}
    np.testing.assert_allclose(session.run(None, again)[0], reference.run(None, again)[0],
                               rtol=1e-5, atol=1e-6)
    session.close()
    reference.close()
