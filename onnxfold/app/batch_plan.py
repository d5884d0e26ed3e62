"""What a batch will do, decided before any job starts: which models, into which outputs.

Everything that can be known without reading a model is checked here, before the first job
starts: two inputs whose outputs would have the same name (``a/m.onnx`` and ``b/m.onnx``), an
output over an input or a file an input reads, an output directory that is an input's
directory. One ``OutputGuard`` claims every output (and pins the ``--json`` summary); the
output directory is resolved once, so a symlink on its way swapped later redirects no job.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from onnxfold.app.commands import ModelJob
from onnxfold.app.shards import Shard, shard_key
from onnxfold.errors import InputError, OutputError
from onnxfold.io import formats
from onnxfold.io.data_names import expected_data_suffix
from onnxfold.io.door import claimed
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.reader import DATA_FILES_KEY, load_model


def is_batch(inputs: list[str], output: str | None) -> bool:
    """Several inputs, a directory as input, or ``-o`` naming a directory (a trailing ``/`` or
    an existing directory): the batch form. One model file and a file ``-o`` (or none) is
    not."""
    return (len(inputs) > 1 or any(os.path.isdir(p) for p in inputs) or (output is not None
            and (output.endswith(("/", os.sep)) or os.path.isdir(output))))

def refuse_foreign_directories(inputs: list[str], recursive: bool) -> None:
    """A directory input with no .onnx file that is another framework's model (a TensorFlow
    SavedModel): say so (``onnxfold.io.formats``) rather than "no .onnx file"."""
    for path in inputs:
        if os.path.isdir(path) and not _models_in(path, recursive, skip=""):
            foreign = formats.describe(path)
            if foreign is not None:
                raise InputError(foreign.message(path))

def check_output_directory(outdir: str) -> None:
    """Several models are written into a directory: an ``-o`` that is an existing file, or a
    new name ending in ``.onnx``, is a mistake (it would become a directory of that name);
    ``out.onnx/`` (an explicit directory) is not."""
    if os.path.lexists(outdir) and not os.path.isdir(outdir):
        raise InputError(f"-o {outdir}: is a file, but several models (or a directory of them) "
                         "are written into a directory: give one, e.g. -o optimized/")
    if outdir.lower().endswith(".onnx") and not os.path.isdir(outdir):
        raise InputError(f"-o {outdir}: several models (or a directory of them) are written "
                         "into a directory, not one .onnx file: give a directory, e.g. "
                         "-o optimized/")


@dataclass
class BatchPlan:
    """The jobs of a batch, and the one guard that claimed every output (and the summary);
    with ``--shard``, the shard's jobs only, and the keys of the whole batch's models and of
    the shard's (``shards.shard_key``, in the jobs' order)."""

    jobs: list[ModelJob]
    guard: OutputGuard
    keys: list[str] = field(default_factory=list)
    taken: list[str] = field(default_factory=list)


def plan(inputs: list[str], outdir: str | None, recursive: bool = False,
         external_data: bool = False, summary: str | None = None,
         shard: Shard | None = None) -> BatchPlan:
    """The jobs for ``inputs`` (files, and directories: their ``*.onnx`` files, sorted; with
    ``recursive`` those of their subdirectories too, written to the same relative paths under
    ``outdir``; ``outdir`` None: a dry run, nothing written), and the guard that claimed their
    outputs and pinned the ``summary`` JSON. Raises before anything is written when two jobs
    would share an output, an output (or the summary) would replace an input or a file an
    input reads, or ``outdir`` is a directory an input is in: for the whole batch, with a
    ``shard`` too (every shard refuses alike), whose models are then the only jobs."""
    outdir_real = os.path.realpath(outdir) if outdir is not None else ""
    found: list[tuple[str, str]] = []  # (input, output path relative to outdir)
    for path in inputs:
        if os.path.isdir(path):
            models = _models_in(path, recursive, skip=outdir_real)
            if not models:
                raise InputError(f"{path}: no .onnx file in this directory"
                                 + ("" if recursive else " (--recursive looks in subdirectories)"))
            found.extend(models)
        else:
            found.append((path, os.path.basename(path)))
    if not found:
        raise InputError("no input model")
    if outdir is None:  # a dry run: the summary JSON may replace no model of any shard
        guard = claimed([(summary, "JSON summary")], models=[source for source, _ in found])
        keys, kept = _sharded(found, shard)
        return BatchPlan([ModelJob(found[index][0], None) for index in kept], guard, keys,
                         [keys[index] for index in kept])
    by_output: dict[str, str] = {}
    for source, relative in found:
        first = by_output.get(relative)
        if first is not None:
            if os.path.realpath(first) == os.path.realpath(source):
                raise InputError(f"{source}: given twice")
            raise OutputError(f"{first} and {source} would both be written to "
                              f"{os.path.join(outdir, relative)}; nothing was written (rename "
                              "one, or optimize them into different directories)")
        by_output[relative] = source
    for source, _ in found:
        if os.path.realpath(os.path.dirname(os.path.abspath(source))) == outdir_real:
            raise OutputError(f"{outdir}: holds the input {source}; write the optimized models "
                              "to another directory (one model may be replaced in place with "
                              "`onnxfold optimize M -o M`)")
    # the output directory resolved once: a symlink on its way swapped later redirects no job
    jobs = [ModelJob(source, os.path.join(outdir_real, relative))
            for source, relative in found]
    outputs = [job.output for job in jobs if job.output is not None]
    guard = OutputGuard([path for job in jobs for path in _files_read(job.source)])
    # every shard claims the whole batch's outputs: a shard's summary may replace no model
    # another shard writes (what one shard refuses, all refuse)
    with _directories(outdir, outputs):  # the guard wants each output's directory to exist
        for job, output in zip(jobs, outputs):
            guard.claim(output, f"output of {job.source}")
            if external_data:
                guard.claim(output + expected_data_suffix(job.source),
                            f"external data of {job.source}'s output")
        if summary is not None:  # resolved once, as every output
            guard.pin(summary, "JSON summary")
    keys, kept = _sharded(found, shard)
    return BatchPlan([jobs[index] for index in kept], guard, keys, [keys[index] for index in kept])


def _sharded(found: list[tuple[str, str]], shard: Shard | None) -> tuple[list[str], list[int]]:
    """The keys of every model found, and the indices of those of ``shard`` (all without)."""
    keys = [shard_key(relative) for _, relative in found]
    taken = shard.taken(keys) if shard is not None else [True] * len(keys)
    return keys, [index for index, kept in enumerate(taken) if kept]


def _files_read(model: str) -> list[str]:
    """``model`` and the external-data files it reads (no job may write over any of them, the
    other jobs' included). A model that cannot be read fails in its own job."""
    try:
        return [model, *load_model(model, check=False).meta.get(DATA_FILES_KEY, ())]
    except (InputError, OutputError):
        return [model]

def _models_in(directory: str, recursive: bool, skip: str) -> list[tuple[str, str]]:
    """``(path, path relative to directory)`` of the .onnx files in ``directory``, sorted;
    ``skip`` (the output directory) is not entered."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if recursive
                         and os.path.realpath(os.path.join(root, d)) != skip)
        for name in sorted(files):
            path = os.path.join(root, name)
            if name.endswith(".onnx") and os.path.isfile(path):
                found.append((path, os.path.relpath(path, directory)))
    return found


@contextlib.contextmanager
def _directories(outdir: str, outputs: list[str]) -> Iterator[None]:
    """Create ``outdir`` and the subdirectories the ``outputs`` need for the block; the ones
    created are removed again if the block raises (they are empty then)."""
    made: list[str] = []
    try:
        for directory in sorted({os.path.dirname(os.path.abspath(o)) for o in outputs}
                                | {os.path.abspath(outdir)}):
            missing = []
            while not os.path.isdir(directory):
                missing.append(directory)
                directory = os.path.dirname(directory)
            for path in reversed(missing):
                try:
                    os.mkdir(path)
                except OSError as e:
                    raise OutputError(f"{path}: cannot create the output directory "
                                      f"({e.strerror})") from None
                made.append(path)
        yield
    except BaseException:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(path)
        raise


def missing_directory(outdir: str) -> str | None:
    """The outermost of ``outdir`` and its parents that does not exist yet (the batch will
    create it), or None."""
    missing = None
    directory = os.path.abspath(outdir)
    while not os.path.lexists(directory):
        missing, directory = directory, os.path.dirname(directory)
    return missing


def remove_empty_directories(top: str) -> None:
    """Remove ``top`` and the directories under it that are empty, deepest first (a directory
    holding a file stays, with its parents)."""
    for directory, _, _ in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(directory)
