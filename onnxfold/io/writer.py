"""Save an onnx-ir model by streaming its weights, atomically.

The graph is serialized without its large initializers; each of them is then appended to the
file as a protobuf field whose bytes ``onnxfold.io.segments`` writes in place: weights still on
disk are copied file-to-file, folded arrays are written from their buffers (non-contiguous views
in chunks). No full in-memory protobuf of the model is ever built. Models whose weights exceed
the protobuf limit are written with external data. Everything goes to temporary files renamed
at the end, so a failure never leaves a half-written output, and the model's own input files
are never targets. The files are written, and judged where the caller asks, without the
output's lock; a model with external data is then published with its data by one rename, one
writer per output at a time (``onnxfold.io.publication``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir

from onnxfold.analysis.shapes import declared_names
from onnxfold.errors import OutputError
from onnxfold.host import endings
from onnxfold.host.points import reached
from onnxfold.io import map_types, segments, text_parts
from onnxfold.io import protowire as pw
from onnxfold.io.data_names import data_suffix, with_own_data
from onnxfold.io.mapped import MappedTensor, detached, input_origin
from onnxfold.io.outputs import OutputGuard
from onnxfold.io.pinned import PinnedOutput
from onnxfold.io.prefill import OutputPrefill
from onnxfold.io.publication import fresh_data_name, kill_point, output_lock, superseded_data
from onnxfold.io.reader import DATA_FILES_KEY, SOURCE_KEY
from onnxfold.io.tempfiles import (
    disown_name,
    note_published,
    own_name,
    temporary,
    write_failed,
)
from onnxfold.io.tensor_facts import data_dims, data_nbytes
from onnxfold.io.text_parts import Part, graph_parts, pwrite_parts, text_field
from onnxfold.ir.blocks import Concatenated
from onnxfold.ir.graph import all_graphs
from onnxfold.ir.long_texts import texts_set_aside
from onnxfold.ir.protos import graph_protos

STREAM_THRESHOLD = 1024
# a large weight's offset in a data file: a multiple of the page size, so that onnxruntime maps
# it instead of reading it into memory (as its own saver aligns them)
DATA_ALIGNMENT = 4096
PROTOBUF_LIMIT = 2**31 - 1
EMBED_LIMIT = 1_800_000_000  # leave headroom under protobuf's 2 GiB for the graph itself


@dataclass
class SaveInfo:
    """What was written."""

    path: str
    data_path: str | None
    bytes_written: int
    streamed_tensors: int


def _streamable(tensor: ir.TensorProtocol | None) -> bool:
    """Large tensors with data; placeholders (references filled in elsewhere) are not."""
    return (tensor is not None and tensor.dtype != ir.DataType.STRING
            and data_nbytes(tensor) >= STREAM_THRESHOLD
            and not getattr(tensor, "is_placeholder", False))


def _tensor(value: ir.Value) -> ir.TensorProtocol:
    """The data of a streamed initializer (``_streamable`` checked that it has some)."""
    assert value.const_value is not None
    return value.const_value


def _header(name: str, tensor: ir.TensorProtocol, external: tuple[str, int] | None) -> bytes:
    proto = onnx.TensorProto(name=name, dims=data_dims(tensor),
                             data_type=int(tensor.dtype))
    for key, value in getattr(tensor, "metadata_props", {}).items():
        proto.metadata_props.add(key=key, value=value)
    if external is not None:
        location, offset = external
        proto.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)),
                           ("length", str(data_nbytes(tensor)))):
            proto.external_data.add(key=key, value=value)
    return proto.SerializeToString()


def input_files(model: ir.Model, graphs: Iterable[ir.Graph] | None = None) -> set[str]:
    """The file the model was loaded from and those its external tensors read (``graphs``:
    ``all_graphs(model)``, when the caller has them)."""
    source = model.meta.get(SOURCE_KEY)
    files = {source} if source else set()
    files.update(model.meta.get(DATA_FILES_KEY, ()))
    for graph in all_graphs(model) if graphs is None else graphs:
        for value in graph.initializers.values():
            if isinstance(value.const_value, ir.ExternalTensor) and \
                    not getattr(value.const_value, "is_placeholder", False):
                files.add(value.const_value.path)
    return files


def _checked_reader(tensor: ir.TensorProtocol) -> Callable[[], np.ndarray] | None:
    """How to read the data of ``tensor`` with checked reads (``onnxfold.io.checked``) when it
    is in an input file (a reference to it, or a folded view of its mapping), else None;
    nothing is read here."""
    if isinstance(tensor, ir.ExternalTensor):
        if getattr(tensor, "is_placeholder", False):
            return None
        if isinstance(tensor, MappedTensor):
            return tensor.checked_numpy
        return tensor.numpy  # onnx-ir's own (a caller's model): it reads the file itself
    raw = tensor.raw if isinstance(tensor, ir.Tensor) else None
    if isinstance(raw, np.ndarray) and input_origin(raw) is not None:
        return lambda: detached(raw)
    if isinstance(raw, Concatenated):  # built where it is serialized: from checked copies
        return lambda: np.asarray(raw.with_pieces(detached))
    return None


def inline_references(model: ir.Model, streamed: set[ir.Value],
                      graphs: Iterable[ir.Graph] | None = None, lazy: bool = False
                      ) -> dict[ir.Value, ir.TensorProtocol]:
    """Give every initializer that is not streamed but still refers to the input's files (a
    small tensor, or one in a subgraph) its data, so that the serializer writes the bytes rather
    than a path that does not exist beside the output; returns the replaced references.

    Folded views of an input's mapping get a copy too: the serializer would read them through
    the mapping, which faults if the file was truncated since. The copies are read with
    ``pread``, so a truncated or removed input is an InputError here (with ``lazy``: where
    the serializer reads each, one at a time, so that a whole model serialized into memory
    holds its weights once, not twice: ``OptimizeResult.to_proto`` of BERT-base held 1.4 GiB
    for 418 MiB of weights). ``graphs``: ``all_graphs(model)``, when the caller has them.
    """
    replaced: dict[ir.Value, ir.TensorProtocol] = {}
    for graph in all_graphs(model) if graphs is None else graphs:
        for value in graph.initializers.values():
            tensor = value.const_value
            if value in streamed or tensor is None:
                continue
            read = _checked_reader(tensor)
            if read is None:
                continue
            replaced[value] = tensor
            name, doc, props = tensor.name, tensor.doc_string, dict(tensor.metadata_props)
            value.const_value = ir.LazyTensor(
                functools.partial(_read_tensor, read, tensor.dtype), tensor.dtype,
                ir.Shape(tensor.shape.numpy()), name=name, doc_string=doc,
                metadata_props=props) if lazy else ir.Tensor(
                read(), dtype=tensor.dtype, name=name, doc_string=doc, metadata_props=props)
    return replaced


def model_proto(model: ir.Model, spend: bool = False) -> onnx.ModelProto:
    """``model`` serialized with every weight's bytes in it, each weight still in an input's
    file read (checked) where the serializer reaches it (:func:`inline_references` with
    ``lazy``); a damaged input is the reader's error, not onnx-ir's ``SerdeError`` around it.
    With ``spend``, each weight the model holds in memory is let go once serialized (nothing
    else holding it): the proto is then the only copy, and the model is not to be used after
    (``simplify`` hands back only the proto: 350 MiB less on BERT-base given as a proto)."""
    inlined = inline_references(model, set(), lazy=True)
    if spend:
        _spent(model)
    try:
        return ir.serde.serialize_model(model)
    except ir.serde.SerdeError as e:
        cause: BaseException | None = e
        while isinstance(cause, ir.serde.SerdeError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise cause from None
    finally:
        restore_references(inlined)


def _spent(model: ir.Model) -> None:
    """Each initializer ``model`` holds as an array, as a tensor given to the serializer once
    and then let go (:func:`model_proto`'s ``spend``)."""
    for graph in all_graphs(model):
        for value in graph.initializers.values():
            tensor = value.const_value
            if type(tensor) is ir.Tensor and isinstance(tensor.raw, np.ndarray) and \
                    tensor.raw.dtype.kind not in "OSU":
                value.const_value = ir.LazyTensor(
                    _Once(tensor), tensor.dtype, ir.Shape(tensor.shape.numpy()),
                    name=tensor.name, doc_string=tensor.doc_string,
                    metadata_props=dict(tensor.metadata_props))


class _Once:
    """A tensor handed out once (:func:`_spent`)."""

    def __init__(self, tensor: ir.Tensor) -> None:
        self._tensor: ir.Tensor | None = tensor

    def __call__(self) -> ir.Tensor:
        tensor, self._tensor = self._tensor, None
        if tensor is None:
            raise RuntimeError("the model was spent by serializing it (to_proto(spend=True))")
        return tensor


def _read_tensor(read: Callable[[], np.ndarray], dtype: ir.DataType) -> ir.Tensor:
    """A lazily inlined initializer's tensor (:func:`inline_references`), read now."""
    return ir.Tensor(read(), dtype=dtype)


def restore_references(replaced: dict[ir.Value, ir.TensorProtocol]) -> None:
    """Undo :func:`inline_references`: the values refer to their files again."""
    for value, reference in replaced.items():
        value.const_value = reference


def prune_value_info(model: ir.Model, proto: onnx.ModelProto) -> int:
    """Drop from ``proto`` (``model`` serialized) the ``value_info`` entries of types that
    were only inferred: the output keeps the ones the input declared (onnxruntime infers
    the rest itself). Returns how many entries went."""
    keep = declared_names(model)
    if keep is None:
        return 0
    dropped = 0
    for graph in graph_protos(proto.graph):
        infos = [vi for vi in graph.value_info if vi.name in keep]
        if len(infos) < len(graph.value_info):
            dropped += len(graph.value_info) - len(infos)
            del graph.value_info[:]
            graph.value_info.extend(infos)
    return dropped


def _byte_counter(total: int, progress: Callable[[int, int], None] | None
                  ) -> Callable[[int], None] | None:
    """``segments.write``'s per-segment byte counts as ``progress(done, total)`` calls (the
    framing between weights counts too; ``done`` never passes ``total``)."""
    if progress is None or total == 0:  # small weights only: written with the graph
        return None
    done = 0
    progress(0, total)

    def count(nbytes: int) -> None:
        nonlocal done
        done = min(total, done + nbytes)
        progress(done, total)

    return count


def _read_with_data(model: ir.Model) -> bool:
    """Whether ``model`` was read with external data (files beside the model's own, whose
    inline weights the reader maps too)."""
    source = model.meta.get(SOURCE_KEY)
    own = os.path.realpath(source) if source is not None else None  # a symlinked input's file
    return bool({os.path.realpath(path) for path in model.meta.get(DATA_FILES_KEY, ())} - {own})


_MODEL_DOC_STRING = 6  # ModelProto.doc_string
def _serialize_without(model: ir.Model, streamed: dict[str, ir.Value],
                       graphs: list[ir.Graph]) -> tuple[bytes, list[Part], str | None]:
    """The model's bytes before its graph, its graph's parts without the ``streamed``
    initializers (they are written from their arrays), its long string attributes written
    from the model's text (``onnxfold.io.text_parts``), and its doc string (written last,
    from the str). ``model`` (whose graphs are ``graphs``) is left as it was."""
    graph = model.graph
    inlined = inline_references(model, set(streamed.values()), graphs)
    for name in streamed:
        graph.initializers.pop(name)
    doc_string, model.doc_string = model.doc_string, None
    try:
        with texts_set_aside(model) as aside:
            proto = ir.serde.serialize_model(model)
    finally:
        model.doc_string = doc_string
        for value in streamed.values():
            graph.register_initializer(value)
        restore_references(inlined)
    prune_value_info(model, proto)
    map_types.give_back_to(model, proto)
    graph_bytes = graph_parts(proto.graph, aside)
    proto.ClearField("graph")
    head = proto.SerializeToString()
    del proto  # its arena holds the graph's strings until it is gone
    return head, graph_bytes, doc_string


def _write_data(data_fd: int, streamed: dict[str, ir.Value],
                counted: Callable[[int], None] | None) -> tuple[list[int], int]:
    """Write the weights to ``data_fd``: each one's offset, and the bytes written."""
    data, end = segments.layout(0, [(b"", v.const_value) for v in streamed.values()],
                                align=DATA_ALIGNMENT)
    segments.write(data_fd, data, counted)
    return [seg.offset for seg in data if not isinstance(seg.data, bytes)], end  # (no padding)


def _write_naming(fd: int, head: bytes, graph_bytes: list[Part], streamed: dict[str, ir.Value],
                  offsets: list[int], data_name: str) -> int:
    """Write the model to ``fd``, its weights in ``data_name`` at ``offsets``: the bytes
    written."""
    headers = [_header(name, _tensor(value), (data_name, offset))
               for (name, value), offset in zip(streamed.items(), offsets, strict=True)]
    fields = [pw.len_prefix(5, len(h)) + h for h in headers]
    graph_len = text_parts.nbytes(graph_bytes) + sum(len(f) for f in fields)
    return pwrite_parts(fd, [head, pw.len_prefix(7, graph_len), *graph_bytes,
                             b"".join(fields)], 0)


def _write_embedded(fd: int, head: bytes, graph_bytes: list[Part],
                    streamed: dict[str, ir.Value],
                    counted: Callable[[int], None] | None, direct: bool = True) -> int:
    """Write the model with its weights inside to ``fd``: the bytes written (``direct``:
    whether large weights may bypass the page cache, ``segments.write``)."""
    pieces = []
    graph_len = text_parts.nbytes(graph_bytes)
    for name, value in streamed.items():
        tensor = _tensor(value)
        nbytes = data_nbytes(tensor)
        header = _header(name, tensor, None)
        raw = pw.len_prefix(9, nbytes)
        body_len = len(header) + len(raw) + nbytes
        pieces.append((pw.len_prefix(5, body_len) + header + raw, tensor))
        graph_len += len(pieces[-1][0]) + nbytes
    first = pwrite_parts(fd, [head, pw.len_prefix(7, graph_len), *graph_bytes], 0)
    tensors, written = segments.layout(first, pieces)
    segments.write(fd, tensors, counted, direct)
    return written


def _remove_superseded_data(output: PinnedOutput, requested: str, data_name: str,
                            guard: OutputGuard, in_place: bool) -> None:
    """Remove the data files an earlier save left beside ``output`` for ``requested`` (not
    ``data_name``, the one just written), where the guard allows it."""
    for old in superseded_data(output.directory, requested, data_name):
        if in_place or guard.removable(output.sibling(old)):
            with contextlib.suppress(OSError):
                output.directory.unlink(old)


def remove_input_data(model: ir.Model, output: PinnedOutput, written: str | None) -> None:
    """After ``model`` replaced its own file: the external-data files it was read from, in
    the output's directory, that the new file does not read (it holds its weights, or reads
    ``written``). Each is removed where its name is the model's (``m.onnx.data``, a
    transformers folder's ``model.onnx_data``: no other model's), else named in a warning
    (another model may read it: ``weights.bin``)."""
    directory = output.directory
    source = model.meta.get(SOURCE_KEY)
    for path in sorted(model.meta.get(DATA_FILES_KEY, ())):
        with contextlib.suppress(OSError):
            if source is not None and os.path.samefile(path, source):
                continue  # the model's own file (a second name of it: a hard link), not data
        name = os.path.basename(path)
        try:
            same = os.path.samestat(directory.stat(name, follow_symlinks=False), os.stat(path))
        except OSError:
            continue
        if not same or name in (written, output.name):
            continue
        if name.startswith(output.name):
            with endings.deferred(), contextlib.suppress(OSError):
                directory.unlink(name)
        else:
            warnings.warn(f"{directory.shown(name)}: the input's external data is not read by "
                          f"{output.given} since it was written in place; left as it is "
                          "(another model may read it)", stacklevel=4)


def save_model(model: ir.Model, path: str | os.PathLike | PinnedOutput, *,
               external_data: bool | None = None, data_name: str | None = None,
               protect: set[str] | None = None, prefill: OutputPrefill | None = None,
               verify: Callable[[str], None] | None = None,
               before_publish: Callable[[str], None] | None = None,
               replaces: Iterable[str] = (),
               progress: Callable[[int, int], None] | None = None,
               guard: OutputGuard | None = None) -> SaveInfo:
    """Write ``model`` to ``path``; ``external_data=None`` chooses external data where the
    model was read with some (the layout follows the input) or its weights need it.

    ``protect`` lists files that must never be written (the CLI passes the input model); the
    model's own external-data sources are protected too (``onnxfold.io.outputs``); a symlinked
    ``path`` is written through. ``path`` is resolved and its directory opened once, here, or
    by the caller (a ``PinnedOutput``): every file of the output is made and renamed in that
    directory (``onnxfold.io.pinned``). ``data_name``: the data file's name in it (default:
    the model's name + the suffix of the input's own data, ``.data`` or ``_data``:
    ``onnxfold.io.data_names``). ``prefill``, started for the same output before folding,
    provides the (already warm) temporary file to write over. ``verify(path of the written
    file)``, for models without external data, may refuse the written file before it replaces
    anything; ``before_publish(path of the written file)`` too, whatever the layout (its data
    already under the name the model reads, which no published model names yet: a check of
    the written model before it replaces anything, the data written once). ``replaces``:
    input files the caller asked to replace (writing a model over
    itself). ``progress(done, total)``: bytes of weights written so far, of ``total`` (the
    progress line's ``save 120.0/480.0 MiB``), told after each weight.

    ``guard``: the output's guard, when the caller has claimed its outputs already (the
    command line's, one per output: it protects the input and its files, and knows what the
    output may replace). The save checks the output with it; ``replaces`` is then the
    guard's, and ``protect`` is added to it. Without one, the save makes its own.
    """
    graphs = all_graphs(model)  # (saving changes no graph's nodes)
    own = guard is None
    if guard is None:
        guard = OutputGuard(input_files(model, graphs), with_own_data(replaces))
    elif replaces:
        raise ValueError("save_model: what an output replaces is its guard's (OutputGuard)")
    if own or protect:
        guard.protect(protect or ())
    output = guard.pin(path, "output model")
    try:
        return _save(model, output, graphs, guard, external_data, data_name, prefill,
                     (verify, before_publish),
                     progress)
    finally:
        if own:
            guard.close()  # the directory it pinned here, if any


@dataclass
class _Files:
    """What one save makes in the output's directory: the model's temporary file, the data's
    (and the fresh name the data gets), and how far publishing them went."""

    output: PinnedOutput
    tmp: str
    data: str  # the data file's name once published
    data_tmp: str | None = None
    renamed: bool = False  # the data has its name (no model names it yet)
    published: bool = False  # the model has its name

    def publish(self, requested: str, guard: OutputGuard, in_place: bool) -> None:
        """The renames that publish the model and its data, then the superseded data's
        removal: one deferred section, never cut in two by a signal."""
        directory = self.output.directory
        with endings.deferred():
            endings.check()  # nothing is published once a signal came
            if self.data_tmp is not None and not self.renamed:
                for old in (self.output.name, requested):  # the model's, else its data's
                    directory.carry_mode(old, self.data_tmp)
            self.name_data()
            kill_point("model-rename")
            directory.carry_mode(self.output.name, self.tmp)
            directory.replace(self.tmp, self.output.name)  # publishes model and data together
            self.published = True
            note_published(self.output.given)
            disown_name(directory, self.data)
            if self.data_tmp is not None:
                kill_point("old-data-removal")
                _remove_superseded_data(self.output, requested, self.data, guard, in_place)

    def take_requested_name(self, requested: str,
                            write_model: Callable[[int, str], int]) -> int | None:
        """Once published under a fresh name because ``requested`` was taken (a second write
        of the output, or in place over the input's own data): the data also gets
        ``requested`` where no file holds it now (the superseded data removed), the model
        written again naming it (``write_model(fd, name)``: its bytes) is published, and the
        fresh name goes. Every step leaves a model naming its whole data: a kill between them
        leaves the data under both names (``trust.resolve_location`` accepts that pair; the
        next write of the output removes the variant). The model's bytes, None where the
        fresh name stays (``requested`` held by a file this run may not remove, or the
        directory refused a step: a file system without hard links, a full disk). The caller
        runs it in the deferred section of the publication: a signal that came while the pair
        was published waits until the data has its name."""
        directory = self.output.directory
        if not self.published or self.data == requested or directory.exists(requested):
            return None
        fd: int | None
        fd, tmp = temporary(directory, self.output.name)
        linked = renamed = False
        try:
            written = write_model(fd, requested)
            os.close(fd)
            fd = None
            with endings.deferred():
                directory.link(self.data, requested)
                linked = True
                kill_point("data-second-name")
                directory.carry_mode(self.output.name, tmp)
                directory.replace(tmp, self.output.name)
                renamed = True
                kill_point("variant-removal")
                with contextlib.suppress(OSError):
                    directory.unlink(self.data)
        except BaseException as e:
            if fd is not None:
                os.close(fd)
            for name, made in ((tmp, not renamed), (requested, linked and not renamed)):
                if made:
                    with contextlib.suppress(OSError):
                        directory.unlink(name)
            if renamed:  # published: the data's name is the one asked for
                self.data = requested
            elif isinstance(e, OSError):  # no hard links here, a full disk: the published
                return None  # pair stands, under the fresh name
            raise
        self.data = requested
        return written

    def name_data(self) -> None:
        """Give the data its name (a name no model names yet), once."""
        if self.data_tmp is not None and not self.renamed:
            with endings.deferred():
                kill_point("data-rename")
                self.output.directory.replace(self.data_tmp, self.data)
                self.renamed = True
                own_name(self.output.directory, self.data)  # removed however the run ends

    def remove_unpublished(self) -> None:
        """Delete what was not published (a failure or a signal on the way)."""
        if self.published:
            return
        with endings.deferred():
            for name in (self.tmp, self.data_tmp, self.data if self.renamed else None):
                if name is not None:
                    with contextlib.suppress(FileNotFoundError):
                        self.output.directory.unlink(name)
            disown_name(self.output.directory, self.data)


def _save(model: ir.Model, output: PinnedOutput, graphs: list[ir.Graph], guard: OutputGuard,
          external_data: bool | None, data_name: str | None, prefill: OutputPrefill | None,
          judges: tuple[Callable[[str], None] | None, Callable[[str], None] | None],
          progress: Callable[[int, int], None] | None) -> SaveInfo:
    """:func:`save_model`'s one path: the model and its data written beside the output under
    temporary names (which no other writer removes) and judged there (``verify``, a model
    without external data; ``before_publish``, any) without the output's lock: a check takes
    minutes, a large write long, and another run on the output waits for neither. Then, under
    the lock, the data gets the fresh name it keeps, the small model file is written naming
    it, and both are published (``_Files.publish``)."""
    directory, shown = output.directory, output.given
    requested = os.path.basename(data_name or output.name + data_suffix(
        model.meta.get(SOURCE_KEY), model.meta.get(DATA_FILES_KEY, ())))
    graph = model.graph
    streamed = {name: v for name, v in graph.initializers.items() if _streamable(v.const_value)}
    total = sum(data_nbytes(_tensor(v)) for v in streamed.values())
    counted = _byte_counter(total, progress)
    if external_data is None or not streamed:  # no data file that nothing reads
        # the layout follows the input: external data in, external data out
        external_data = bool(streamed) and (total > EMBED_LIMIT or _read_with_data(model))
    if not external_data and total > PROTOBUF_LIMIT:
        raise OutputError(f"{shown}: {total} bytes of weights exceed protobuf's 2 GiB limit; "
                          "use external data")
    if external_data:
        guard.pin(output.sibling(requested), "output model's external data")

    head, graph_bytes, doc_string = _serialize_without(model, streamed, graphs)
    offsets: list[int] = []  # of the weights in the data file, once written

    def write_naming(fd: int, data_name: str) -> int:
        """The model written to ``fd``, its weights in ``data_name``: its bytes."""
        return _finished(fd, _write_naming(fd, head, graph_bytes, streamed, offsets, data_name),
                         doc_string)

    in_place = guard.replaces_input(output)
    verify, before_publish = judges
    reached("saving")
    fd: int | None
    taken = prefill.take(output) if prefill is not None else None
    fd, tmp = taken or temporary(directory, output.name)
    files = _Files(output, tmp, requested)
    data_fd = None
    try:
        end = written = 0
        if external_data:
            data_fd, files.data_tmp = temporary(directory, requested)
            placed, end = _write_data(data_fd, streamed, counted)
            offsets.extend(placed)
            os.close(data_fd)
            data_fd = None
            if before_publish is not None:  # the model judged names its data's temporary file
                written = write_naming(fd, files.data_tmp)
        else:
            # (pages a prefill warmed are overwritten in the page cache: a direct write would
            # first write their zeros out)
            written = _finished(fd, _write_embedded(fd, head, graph_bytes, streamed, counted,
                                                    direct=taken is None), doc_string)
        os.close(fd)
        fd = None
        reached("written")
        if verify is not None and not external_data:
            verify(directory.path_of(tmp))
        if before_publish is not None:
            before_publish(directory.path_of(tmp))
        with output_lock(output):
            if external_data:  # named as published now: the model names its data's name
                files.data = fresh_data_name(directory, requested)
                fd = directory.open(tmp, os.O_WRONLY)
                written = write_naming(fd, files.data)
                os.close(fd)
                fd = None
            written = _published(files, model, requested, guard, in_place, external_data,
                                 write_naming, written)
    except OSError as e:
        raise write_failed(shown, e) from None
    finally:
        for open_fd in (fd, data_fd):
            if open_fd is not None:
                os.close(open_fd)
        files.remove_unpublished()
    return SaveInfo(shown, directory.shown(files.data) if external_data else None,
                    written + end, len(streamed))


def _published(files: _Files, model: ir.Model, requested: str, guard: OutputGuard,
               in_place: bool, external_data: bool, write_naming: Callable[[int, str], int],
               written: int) -> int:
    """Publish ``files`` (``_Files.publish``), remove the input's data that a model written in
    place no longer reads, and give published data the name ``requested`` where it could not
    be written under it (``_Files.take_requested_name``, the model written again by
    ``write_naming(fd, data name)``), in one deferred section: a signal that comes once the
    pair is published waits until the data has its name. The model's bytes as they are now."""
    with endings.deferred():
        files.publish(requested, guard, in_place)
        if in_place:
            remove_input_data(model, files.output, files.data if external_data else None)
        if not external_data:
            return written
        again = files.take_requested_name(requested, write_naming)
        return written if again is None else again


def _finished(fd: int, written: int, doc_string: str | None) -> int:
    """The model's doc string written after its ``written`` bytes, the file cut there (a
    prefilled or rewritten file may be longer): the bytes of the model."""
    if doc_string:
        written += pwrite_parts(fd, text_field(_MODEL_DOC_STRING, doc_string), written)
    os.ftruncate(fd, written)
    return written
