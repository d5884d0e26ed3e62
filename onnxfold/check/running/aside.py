"""The optimized model's session, built in a second thread while the original's is built.

onnxruntime builds a session on one core (its graph transformations, its prepacking) and
releases Python's lock while it does, so on a machine of two cores the check's two sessions
(the original's, which it runs first, and the optimized model's, which it runs after) can be
built at once: on BERT-base the second costs 0.9 s of the check's wall, built alone. Both are
then held together, so the check does it only where both fit in half the memory left
(``memory.both_sessions_fit``); elsewhere it opens one after the other, as before.

The build is awaited before the check's first run: a run holds the process's address space
to the memory left (``onnxfold.host.address_space``), which a build beside it would take from
and fail within. The wait is in steps of :data:`POLL` seconds, so a signal ends it at once
(the build itself, native code, is left to end: onnxruntime stops no session halfway).
"""

from __future__ import annotations

import threading

from onnxfold.check.running.runner import SessionParts, WholeSession, built_session

POLL = 0.25  # longest uninterrupted wait for the build (a signal's handler runs between)


def started(parts: SessionParts, label: str) -> SessionAside | None:
    """A :class:`SessionAside` building, or None where no thread could be started for it
    (a limit on threads: the session is then opened where it is needed, as without)."""
    aside = SessionAside(parts, label)
    try:
        aside.thread.start()
    except RuntimeError:  # "can't start new thread"
        return None
    return aside


class SessionAside:
    """A session over ``parts`` (``runner.session_parts``, made in the calling thread) built
    in a thread of its own (:func:`started` starts it); :meth:`session` waits for it and hands
    it over, or raises what building it raised (InputError, MachineShort, as
    ``runner.open_session`` does)."""

    def __init__(self, parts: SessionParts, label: str) -> None:
        self._done = threading.Event()
        self._session: WholeSession | None = None
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._build, args=(parts, label), daemon=True,
                                       name="onnxfold-check-session")

    def _build(self, parts: SessionParts, label: str) -> None:
        try:
            self._session = built_session(parts, label)
        except BaseException as e:  # handed to the waiting thread as it is
            self._error = e
        finally:
            self._done.set()

    def wait(self) -> None:
        """Until the build ended (a signal ends the wait: its handler raises here)."""
        while not self._done.wait(POLL):
            pass

    @property
    def built(self) -> bool:
        """Whether the build has ended with a session (not with an error)."""
        return self._done.is_set() and self._error is None

    def session(self) -> WholeSession:
        """The session, once built."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._session is not None  # (built, or the error raised)
        return self._session
