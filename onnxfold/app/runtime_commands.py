"""``onnxfold split`` (a model cut around its runtime constants into runtime_fold + entry) and
``onnxfold run`` (a model run with its runtime constants folded once, by ``onnxfold.Session``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from onnxfold.app.commands import RunCommand, SplitCommand
from onnxfold.errors import InputError
from onnxfold.host import interruptible
from onnxfold.host.machine import checked_threads
from onnxfold.host.points import reached

if TYPE_CHECKING:
    import numpy as np

    from onnxfold.io.pinned import PinnedOutput
    from onnxfold.runtime.session import Session


def split(command: SplitCommand) -> int:
    """Split the model and write its parts and manifest into the output directory."""
    from onnxfold.declare.catalogue import load_catalogue
    from onnxfold.io import load_model
    from onnxfold.io.writer import input_files
    from onnxfold.runtime.split import optimize_and_split, split_outputs, write_split

    with split_outputs(command.output, [command.source]) as guard:  # before any work
        reached("claimed")
        model = load_model(command.source, check=command.check_input)
        guard.protect(input_files(model))
        parts = optimize_and_split(model, command.runtime_constants, load_catalogue(),
                                   command.fold,
                                   "fold" if command.fold_compile_time else "separate")
        for path in write_split(parts, command.output, guard=guard):
            print(f"wrote {path}")
    fold = parts.manifest["runtime_fold"]
    print(f"runtime_fold: {len(parts.runtime_fold.graph)} nodes, "
          f"{len(fold['inputs'])} inputs -> {len(fold['outputs'])} folded tensors for entry")
    print(parts.low_rank.summary())
    return 0


def run(command: RunCommand) -> int:
    """Run the model ``command.repeat`` times on its inputs; print the outputs' types and the
    timings (and, with ``--compare``, onnxruntime's ways of running it); write the outputs."""
    import numpy as np

    from onnxfold.io.feeds import load_arrays
    from onnxfold.io.tempfiles import write_atomic

    output = _claim_output(command)
    if command.repeat < 1:
        raise InputError(f"--repeat {command.repeat}: must be at least 1")
    feeds = load_arrays(command.inputs)
    options = _run_session_options(command.threads)
    with _session(command, options) as session:  # its temporary directory removed at the end
        reached("session")
        outputs, names = _run_session(command, session, feeds, options)
    if output is not None:
        arrays = dict(zip(names, outputs))
        write_atomic(output, lambda f: np.savez(f, **arrays))
    return 0


def _run_session(command: RunCommand, session: Session, feeds: dict[str, np.ndarray],
                 options: Any) -> tuple[list, list[str]]:
    """Run ``session`` as ``command`` says and print what it did; the last outputs and their
    names."""
    import numpy as np

    constants = set(session.runtime_constants) if command.adapters else set()
    missing = [i.name for i in session.get_inputs()
               if i.name not in feeds and i.name not in constants]
    if missing:
        raise InputError(f"{command.inputs}: no array for input(s) {', '.join(missing)}")
    outputs, times = _timed_runs(session, feeds, command.repeat)
    names = [o.name for o in session.get_outputs()]
    for name, arr in zip(names, outputs):
        print(f"{name}: {arr.dtype} {list(arr.shape)}")
    print(f"backend {command.backend}: first call {times[0] * 1e3:.1f} ms "
          f"(fold {session.fold_seconds * 1e3:.1f} ms)" + (
              f", then median {np.median(times[1:]) * 1e3:.2f} ms over {len(times) - 1} runs"
              if len(times) > 1 else ""))
    print(session.parts.low_rank.summary())
    if command.compare:
        from onnxfold.app.runtime_compare import compare

        # its rows' calls are timed as they are: the whole comparison runs where a signal
        # stops it (its Sessions' folds stop between kernels, the rest is left to end)
        print(interruptible.run(lambda _options: compare(
            command.model, session.runtime_constants, feeds, command.backend,
            max(command.repeat, 5), command.adapters, options, command.fold),
            what="run --compare", timeout=None).render())
    return outputs, names


def _claim_output(command: RunCommand) -> PinnedOutput | None:
    """``-o FILE.npz``, claimed (never over the model, its files, the inputs or an adapter)
    and its directory pinned; None without ``-o``."""
    if not command.output:
        return None
    from onnxfold.io.door import claimed

    guard = claimed([(command.output, "outputs")], [command.inputs, *command.adapters],
                    [command.model])
    return guard.pinned(command.output)


def _session(command: RunCommand, sess_options: Any) -> Session:
    """The ``onnxfold.Session`` the command runs (the first adapter's tensors fed, if any)."""
    from onnxfold.runtime.session import Session

    return Session(command.model, command.runtime_constants, backend=command.backend,
                   cache_dir=command.cache_dir, options=command.fold,
                   custom_op_libraries=command.custom_op_libraries, sess_options=sess_options,
                   adapter=command.adapters[0] if command.adapters else None)


def _timed_runs(session: Session, feeds: dict[str, np.ndarray], repeat: int
                ) -> tuple[list, list[float]]:
    """The last run's outputs, and every run's seconds (each timed in the thread that runs
    it, stopped by a signal or the inference time limit: ``onnxfold.host.interruptible``)."""

    def timed(options: Any) -> tuple[list, float]:
        started = time.perf_counter()
        outputs = session.run(None, feeds, options)
        return outputs, time.perf_counter() - started

    times = []
    outputs: list = []
    for _ in range(repeat):
        outputs, seconds = interruptible.run(timed, what="a call")
        times.append(seconds)
        reached("ran")
    return outputs, times


def _run_session_options(threads: int | None) -> Any:
    """onnxruntime's SessionOptions for ``run``: ``--threads`` intra-op threads, or None."""
    if threads is None:
        return None
    try:
        checked_threads(threads, "--threads")
    except ValueError as e:
        raise InputError(str(e)) from None
    from onnxfold.host.ort_sessions import session_options

    return session_options(log_level=None, threads=threads)
