"""Values for a model's symbolic input dims that respect the relations its graph states.

Random inputs for a KV-cache decoder cannot set every dynamic dim to 1: the attention mask is
indexed by positions ``0 .. past + sequence - 1``, so its length must be past + sequence or
onnxruntime fails ("GatherND invalid index"). Exporters rarely declare that relation on the
inputs (dynamo names the mask's length ``s53``, TorchScript ``total``), but the graph states it:
a Gather or GatherND reads an input (through the layout ops an exporter puts before it:
``Transpose(Cast(mask))``) along an axis with indices as long as an expression of the other
inputs' dims, or a broadcasting op aligns an input's dim with such an expression (a causal
mask, an ALiBi bias). Those expressions come from shape inference (which writes dynamo's
``s70 + s88`` as a dim name) and the check's own walk of the shape computations
(:mod:`onnxfold.check.inputs.graph_dims`: not the fold's, whose blind spots would choose the
inputs that hide them), and an input dim declared as an expression is one too.
Where a relation is stated in a way not read here, the bindings tried after the first two
take each guessed length as the sum of two others.

:func:`plan` gives three bindings of every named input dim: a *prefill* one where dims
not on axis 0 are :data:`WIDE` (sequence and past lengths > 1, batch 1; an image's height and
width :data:`IMAGE_SIZE`), and the *decode step* where they are 1 but a cache's length stays
WIDE (one new token after a past), and a *varied* one at other values again; every dim the
graph relates to others is computed from them, and a given dim is never moved (:func:`settle`).
What was guessed (not given, not derived) is listed so a message can name the ``--dim`` to
set. (The check names every anonymous dim, ``?``, unnamed or -1, by input and axis before it
plans: ``onnxfold.check.inputs.feeds``.)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

import onnx
import onnx_ir as ir

from onnxfold.analysis.shapes import infer_shapes
from onnxfold.check.inputs.graph_dims import (
    AxisNames,
    GraphDims,
    Linear,
    Poly,
    as_int,
    factors,
    linear,
    parse,
)
from onnxfold.ir.constants import constant_array
from onnxfold.ir.graph import PASSES_ELEMENTS, is_default_op

WIDE = 16  # the prefill binding's length of dims off axis 0 (1 would hide broadcasting bugs)
IMAGE_SIZE = 224  # an image's height and width where the graph does not fix them
# guessed lengths off axis 0 to try, in order, when a model cannot run the first bindings (an
# image that a detector downsamples 32 times, an audio frame a reflect pad needs longer)
LARGER = (64, 256, 1024)
# an image's height and width tried, in order, when the reference ran out of memory at
# IMAGE_SIZE (an attention over the pixels of a latent grows with their square)
SMALLER_IMAGES = (112, 64, 32)



@dataclass(frozen=True)
class Profile:
    """How one binding sets the dims nothing gives or relates: the dims on axis 0 (a batch)
    ``batch``, the lengths off axis 0 ``width``, a cache's length ``held``, an image's height
    and width ``side``. The unnamed dims follow the same numbers
    (``onnxfold.check.inputs.feeds``)."""

    name: str
    batch: int
    width: int
    held: int
    side: int


def profiles(width: int = WIDE, side: int = IMAGE_SIZE) -> tuple[Profile, Profile, Profile]:
    """The three bindings of one size: a *prefill* (batch 1, lengths ``width``), a *decode*
    step (batch 2, one new token after a cache of ``width``) and a third with every guessed
    dim at another value again (batch 3, odd lengths, another cache length and image side), so
    that each guessed dim takes at least two values over the input sets: a fold that baked a
    dynamic dim computes something else at one of them."""
    varied_side = max(16, side * 5 // 7 // 16 * 16)  # 160 for 224: another multiple of 16/32
    varied_width = max(3, width // 2 - 1) | 1  # 7 for 16: odd, off any power of two
    varied_held = max(2, width // 3)  # 5 for 16
    return (Profile("prefill", 1, width, width, side), Profile("decode", 2, 1, width, side),
            Profile("varied", 3, varied_width, varied_held, varied_side))


def longer(width: int) -> tuple[Profile, Profile, Profile]:
    """The bindings of a larger guess (a model that cannot run short lengths: an audio
    model's reflect padding, a detector's downsampling): lengths (and images' sides)
    ``width`` at batch 1, longer again at batch 2, and between the two at batch 3, so that
    every guessed dim takes three values there as in :func:`profiles`."""
    longest = width + width // 2 + 1  # an image's sides follow (a detector's multiples)
    between = width + width // 4 + 1
    return (Profile("prefill", 1, width, width, width),
            Profile("longer", 2, longest, width // 2 + 1, longest),
            Profile("varied", 3, between, width // 4 + 1, between))


def aligned(multiple: int) -> tuple[Profile, Profile, Profile]:
    """The bindings of a model that splits a length into blocks (Falcon-H1's and Zamba2's
    chunks of 8, a Reshape to ``[-1, 24]``): lengths (and images' sides) ``multiple`` at
    batch 1, twice it at batch 2, three times at batch 3."""
    return (Profile("prefill", 1, multiple, multiple, multiple),
            Profile("longer", 2, 2 * multiple, multiple, 2 * multiple),
            Profile("varied", 3, 3 * multiple, 2 * multiple, 3 * multiple))


@dataclass(frozen=True)
class Bound:
    """One binding: a value for every named input dim, and the profile that chose the guessed
    ones (the unnamed dims follow its numbers)."""

    dims: dict[str, int]
    profile: Profile


@dataclass
class DimPlan:
    """Bindings of every named input dim, and how each value was chosen."""

    bindings: list[Bound]  # the first group: the prefill, decode and varied profiles
    derived: dict[str, str] = field(default_factory=dict)  # dim -> "past + seq (node X)"
    guessed: list[str] = field(default_factory=list)  # dims neither given nor derived
    forms: dict[str, Linear] = field(default_factory=dict)  # dim -> its linear form
    # groups tried in turn when no binding of the first runs: each guessed dim off axis 0 as
    # the sum of two others (twice the width), then the guessed dims at LARGER sizes
    larger: list[list[Bound]] = field(default_factory=list)
    # groups tried when the reference runs out of memory: images' sides at SMALLER_IMAGES
    smaller: list[list[Bound]] = field(default_factory=list)
    on_axis0: frozenset[str] = frozenset()  # guessed dims on axis 0 of an input (batches)
    sizes: frozenset[str] = frozenset()  # guessed dims that are images' sides
    given: frozenset[str] = frozenset()  # dims given or fixed by given ones: never moved
    held: frozenset[str] = frozenset()  # guessed dims that are a cache's length
    notes: list[str] = field(default_factory=list)  # variants not run, and why
    # the group of :func:`aligned` bindings of a multiple (none where no length is guessed)
    aligned: Callable[[int], list[Bound]] = field(default=lambda multiple: [], repr=False)
    prompts: list[OneBatchPrompt] = field(default_factory=list)  # batches of one, where

    def variants(self, bound: Bound) -> list[Bound]:
        """Bindings like ``bound`` with its guessed batches doubled, and with its other
        guessed lengths doubled (an image's sides too), the related dims computed again: a
        binding that runs most often still runs so (a sum of lengths doubles with them), so
        that every guessed dim takes a second value even where the graph's relations were
        not read. A given dim (``--dim``, ``--input-shape``, the second model's) never
        moves: where a relation ties it to doubled dims, another guessed dim of the relation
        takes up the difference, and a variant no such value keeps is not made (a note
        says so)."""
        found = []
        guessed = set(self.guessed)
        equations = {n: (f, "") for n, f in self.forms.items()}
        for batches, chosen in ((True, self.on_axis0 & guessed),
                                (False, guessed - self.on_axis0)):
            if not chosen:
                continue
            p = bound.profile
            profile = Profile(f"{p.name}, batch x2" if batches else f"{p.name}, lengths x2",
                              p.batch * 2 if batches else p.batch,
                              p.width if batches else p.width * 2,
                              p.held if batches else p.held * 2,
                              p.side if batches else p.side * 2)
            free = {name: bound.dims[name] * 2 if name in chosen else bound.dims[name]
                    for name in self.guessed if name in bound.dims}
            given = {name: bound.dims[name] for name in self.given if name in bound.dims}
            dims, broken = settle(free, given, equations, set(bound.dims), self.held,
                                  keep=chosen)
            if any(not prompt.held(dims) for prompt in self.prompts):
                self.notes.append(f"the {profile.name} binding was not run: onnxruntime's "
                                  f"{self.prompts[0].where} takes several new tokens after a "
                                  "past one sequence at a time")
                continue
            if broken:
                self.notes.append(f"the {profile.name} binding was not run: it would move "
                                  f"{broken} ({', '.join(sorted(chosen))} doubled)")
                continue
            found.append(Bound(dims, profile))
        return found

    def offset(self, dim: object, binding: Mapping[str, int]) -> int:
        """Where positions along ``dim`` start: ``P`` when the graph relates a total length to
        ``P + dim`` (a decoder's positions follow its past), else 0."""
        if not isinstance(dim, str):
            return 0
        for form in self.forms.values():
            others = {k: v for k, v in form.items() if k != dim}
            if form.get(dim) == 1 and len(others) == 1 and list(others.values()) == [1]:
                other = next(iter(others))
                if other:
                    return binding.get(other, 0)
        return 0


def is_named(dim: object) -> TypeGuard[str]:
    """Whether a dim onnxruntime reports is a named one: ``?``, an empty name and None are
    not (exporters write ``?`` for dims that are each their own)."""
    return isinstance(dim, str) and dim not in ("", "?")


def _name(d: Poly | None) -> str | None:
    """The dim name a dim is, where it is one name alone."""
    if d is not None and len(d) == 1:
        (names, coeff), = d.items()
        if coeff == 1 and len(names) == 1:
            return names[0]
    return None


def _text(form: Linear) -> str:
    parts = [(f"{v}*{k}" if v not in (1, -1) else k if v == 1 else f"-{k}") if k else str(v)
             for k, v in form.items() if v]
    text = " + ".join(parts).replace("+ -", "- ")
    return text or "0"


class _Relations:
    """``dim = expression`` equations read off the graph, the first found for each dim."""

    def __init__(self, names: set[str], axis_names: AxisNames) -> None:
        self.names = names
        self.axis_names = axis_names
        self.equations: dict[str, tuple[Linear, str]] = {}

    def add(self, target: Poly | None, expression: Poly | None, where: str) -> None:
        self.add_form(_name(target), linear(expression), where)

    def add_form(self, name: str | None, form: Linear | None, where: str) -> None:
        """``name = form``, unless ``name`` is no input dim, has an equation already, or
        ``form`` reads it or a dim not the inputs'."""
        if name is None or name not in self.names or name in self.equations or form is None or \
                form == {name: 1} or name in form or not set(form) - {""} <= self.names:
            return
        if set(form) == {""} and form[""] <= 1:
            return  # an index count of 1 says nothing about the axis it reads
        if any(self._depends_on(k, name) for k in form if k):
            return  # a = b here and b = a elsewhere: the first one found holds
        self.equations[name] = (form, where)

    def _depends_on(self, dim: str, target: str) -> bool:
        """Whether ``dim``'s equation reads ``target``, directly or through others."""
        stack, seen = [dim], set()
        while stack:
            current = stack.pop()
            if current == target:
                return True
            if current in seen or current not in self.equations:
                continue
            seen.add(current)
            stack.extend(k for k in self.equations[current][0] if k)
        return False


# Ops an exporter puts between an input and its use that move its elements (and so its dims)
# without computing new ones: a mask reaches a decoder's GatherND as
# ``Transpose(Cast(attention_mask))`` in dynamo exports.
LAYOUT_OPS = PASSES_ELEMENTS | {"Transpose", "Expand", "Slice", "Tile", "Concat", "Where",
                                "Pad", "Not", "Equal", "Greater", "Less", "GreaterOrEqual",
                                "LessOrEqual", "And", "Or", "Sub", "Add", "Mul"}
LAYOUT_DEPTH = 12


def _reads_input(value: ir.Value | None) -> bool:
    """Whether ``value`` comes from a graph input through layout ops (:data:`LAYOUT_OPS`,
    at most :data:`LAYOUT_DEPTH` deep): its dims are then the input's, moved."""
    frontier = [value] if value is not None else []
    seen: set[ir.Value] = set(frontier)  # (a value read 8 times over 12 levels: once)
    for _ in range(LAYOUT_DEPTH):
        following: list[ir.Value] = []
        for current in frontier:
            if current.is_graph_input():
                return True
            producer = current.producer()
            if producer is None or producer.op_type not in LAYOUT_OPS or \
                    producer.domain not in ("", "ai.onnx"):
                continue
            for v in producer.inputs:
                if v is not None and v.const_value is None and v not in seen:
                    seen.add(v)
                    following.append(v)
        if not following:
            return False
        frontier = following
    return False


def _index_relations(model: ir.Model, known: GraphDims, relations: _Relations) -> None:
    """Each Gather/GatherND reading an input: the axis it indexes is as long as the index."""
    for node in model.graph:
        if not (is_default_op(node, "Gather") or is_default_op(node, "GatherND")) or \
                len(node.inputs) < 2 or node.inputs[0] is None or node.inputs[1] is None:
            continue  # (no dims asked of the others: a 16k-node Llama planned 13% faster)
        data, indices = node.inputs[0], node.inputs[1]
        index_dims, data_dims = known.dims(indices), known.dims(data)
        if not _reads_input(data) or index_dims is None or data_dims is None:
            continue
        extents = [d for d in index_dims if as_int(d) != 1]
        where = node.name or node.op_type
        if is_default_op(node, "GatherND") and node.attributes.get_int("batch_dims", 0) == 0:
            depth = as_int(index_dims[-1]) if index_dims else None
            extents = extents[:-1] if extents and as_int(extents[-1]) == depth else extents
            if depth is not None and len(extents) == depth:
                for target, extent in zip(data_dims[:depth], extents):
                    relations.add(target, extent, f"indexed by {where}")
        elif is_default_op(node, "Gather"):
            axis = node.attributes.get_int("axis", 0)
            if not -len(data_dims) <= axis < len(data_dims):
                continue
            parts = factors(data_dims[axis])
            # a flattened [b, n] read at b*n + i: the factors pair with the extents only when
            # one pair is the same dim (b with b); a product's factors come in any order, so
            # the extents are ordered alike where they are names
            ordered = _paired(parts, extents)
            if len(parts) == len(extents) and any(
                    f == e or linear(f) == linear(e) is not None
                    for f, e in zip(parts, ordered)):
                for target, extent in zip(parts, ordered):
                    relations.add(target, extent, f"indexed by {where}")


def _paired(parts: list[Poly], extents: list[Poly | None]) -> list[Poly | None]:
    """``extents`` reordered so that each one equal to a factor of ``parts`` stands beside it
    (the others keep their order in the places left)."""
    if len(parts) != len(extents):
        return extents
    placed: list[Poly | None] = [None] * len(parts)
    free = list(range(len(parts)))
    rest: list[Poly | None] = []
    for extent in extents:
        match = next((i for i in free if parts[i] == extent), None)
        if match is None:
            rest.append(extent)
        else:
            placed[match] = extent
            free.remove(match)
    for i, extent in zip(free, rest):
        placed[i] = extent
    return placed


# Elementwise ops that broadcast their inputs: two dims on one aligned axis are equal unless
# one is 1, and exporters broadcast a mask against positions at full length (a Bloom-style
# ALiBi bias, GPT-2's causal mask), so a symbolic dim there is taken as the other's length.
BROADCASTING_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Where", "And", "Or", "Xor", "Equal",
                              "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Max", "Min",
                              "BitwiseAnd", "BitwiseOr", "Pow"})


def _broadcast_relations(model: ir.Model, known: GraphDims, relations: _Relations) -> None:
    """Each broadcasting node: a named input dim aligned with another symbolic dim is it."""
    for node in model.graph:
        if node.op_type not in BROADCASTING_OPS or node.domain not in ("", "ai.onnx"):
            continue
        shapes = [dims for dims in (known.dims(v) for v in node.inputs if v is not None)
                  if dims is not None]
        if len(shapes) < 2:
            continue
        where = f"broadcast by {node.name or node.op_type}"
        for k, first in enumerate(shapes):
            for other in shapes[k + 1:]:
                for a, b in zip(reversed(first), reversed(other)):
                    if a is None or b is None or a == b or as_int(a) == 1 or as_int(b) == 1 or \
                            (as_int(a) is not None and as_int(b) is not None):
                        continue
                    relations.add(a, b, where)
                    relations.add(b, a, where)


ORT_DOMAIN = "com.microsoft"
# Ops that pass a scalar on unchanged (a length read off a shape, cast to int32 for an op)
_SCALAR_PASSING = frozenset({"Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity"})


def _input_dim_name(value: ir.Value | None, axis: int, axis_names: AxisNames) -> str | None:
    """The name of graph input ``value``'s dim at ``axis``, or None."""
    if value is None or not value.is_graph_input() or value.shape is None or \
            not -len(value.shape) <= axis < len(value.shape):
        return None
    label = getattr(value.shape[axis], "value", None)
    named = label if is_named(label) else None
    return named or axis_names.get((value.name or "", axis % len(value.shape)))


def _length_read(value: ir.Value | None, axis_names: AxisNames) -> str | None:
    """The input dim ``value`` holds as a number: ``Gather(Shape(x), i)`` of a graph input x,
    through casts and reshapes of the scalar (genai's ``total_sequence_length``, read off the
    attention mask), by its name; None otherwise."""
    for _ in range(LAYOUT_DEPTH):
        producer = value.producer() if value is not None else None
        if producer is None or producer.domain not in ("", "ai.onnx"):
            return None
        if producer.op_type in _SCALAR_PASSING:
            value = producer.inputs[0] if producer.inputs else None
            continue
        if producer.op_type != "Gather" or len(producer.inputs) < 2:
            return None
        shape, index = producer.inputs[0], producer.inputs[1]
        reader = shape.producer() if shape is not None else None
        picked = constant_array(index) if index is not None else None
        if reader is None or reader.op_type != "Shape" or picked is None or picked.size != 1:
            return None
        source = reader.inputs[0] if reader.inputs else None
        rank = len(source.shape) if source is not None and source.shape is not None else 0
        start = reader.attributes.get_int("start", 0)
        axis = int(picked.reshape(-1)[0]) + (start + rank if start < 0 else start)
        return _input_dim_name(source, axis, axis_names)
    return None


def _last_dim(value: ir.Value | None) -> int | None:
    """``value``'s last dim where it is static: its shape's, or where none is known the
    output width of the MatMul (and Add of a bias) making it from a weight."""
    while value is not None:
        if value.shape is not None and len(value.shape) and isinstance(value.shape[-1], int):
            return value.shape[-1]
        producer = value.producer()
        if producer is None or producer.domain not in ("", "ai.onnx") or \
                producer.op_type not in ("MatMul", "Add") or len(producer.inputs) != 2:
            return None
        weight = producer.inputs[1]
        tensor = weight.const_value if weight is not None else None
        if producer.op_type == "MatMul" and tensor is not None and len(tensor.shape) >= 2:
            return tensor.shape.numpy()[-1]
        value = producer.inputs[0]
    return None


def _attention_nodes(model: ir.Model) -> Iterator[tuple[ir.Node, list[ir.Value | None]]]:
    """The main graph's GroupQueryAttention nodes, each with its seven first inputs (None
    where left out)."""
    for node in model.graph:
        if node.domain == ORT_DOMAIN and node.op_type == "GroupQueryAttention":
            yield node, (list(node.inputs) + [None] * 7)[:7]


def attention_caches(model: ir.Model) -> frozenset[str]:
    """The graph inputs onnxruntime's GroupQueryAttention reads as past keys and values:
    KV caches, whatever their shape suggests (genai names the head size ``kv_cache_dim``, so
    ``[batch, 2, past, kv_cache_dim]`` looks like an image of 2 channels)."""
    return frozenset(str(value.name) for _, ins in _attention_nodes(model)
                     for value in ins[3:5] if value is not None and value.is_graph_input())


@dataclass(frozen=True)
class OneBatchPrompt:
    """onnxruntime's GroupQueryAttention runs new tokens after a past only one sequence at a
    time ("batch_size must be 1 when sequence_length > 1 and past context is given"): a
    prompt of ``batch`` sequences has no past, a past is followed by one token per
    sequence, or the batch is one. Dims by name; ``where``: the node."""

    batch: str
    new: str
    past: str
    where: str

    def held(self, dims: Mapping[str, int]) -> bool:
        """Whether ``dims`` is a state generation produces."""
        return not (dims.get(self.batch, 1) > 1 and dims.get(self.new, 1) > 1 and
                    dims.get(self.past, 0) > 0)


def _attention_relations(model: ir.Model, relations: _Relations) -> list[OneBatchPrompt]:
    """What onnxruntime's GroupQueryAttention requires of the dims it reads: its past keys
    and values hold ``kv_num_heads`` heads of the head size (the query's width over the
    heads it packs), and the total length it is given (genai reads it off the attention
    mask) is the past's plus the new tokens' (onnxruntime: "total_sequence_length must equal
    past_sequence_length + kv_sequence_length for a dynamic cache"), as in every state
    generation produces; and where it takes several new tokens after a past, one sequence
    (:class:`OneBatchPrompt`)."""
    prompts: list[OneBatchPrompt] = []
    names = relations.axis_names
    for node, ins in _attention_nodes(model):
        query, key, past = ins[0], ins[1], ins[3]
        if past is None or past.shape is None or len(past.shape) != 4:
            continue
        where = f"{node.name or node.op_type} ({node.op_type})"
        heads = node.attributes.get_int("num_heads", 0)
        kv_heads = node.attributes.get_int("kv_num_heads", 0)
        width = _last_dim(query)
        packed = heads + (2 * kv_heads if key is None else 0)
        if width and packed and width % packed == 0:
            relations.add_form(_input_dim_name(past, 3, names), {"": width // packed},
                               f"head size of {where}")
        if kv_heads:
            relations.add_form(_input_dim_name(past, 1, names), {"": kv_heads},
                               f"kv_num_heads of {where}")
        dims = [getattr(d, "value", None) for d in query.shape] \
            if query is not None and query.shape is not None and len(query.shape) == 3 else []
        batch = _input_dim_name(past, 0, names)
        new = dims[1] if dims and is_named(dims[1]) else None
        past_length = _input_dim_name(past, 2, names)
        total = _length_read(ins[6], names)
        if total and past_length and new:
            relations.add_form(total, {past_length: 1, new: 1}, f"total length of {where}")
        if batch and new and past_length and \
                all(p != (batch, new, past_length) for p in
                    ((p.batch, p.new, p.past) for p in prompts)):
            prompts.append(OneBatchPrompt(batch, new, past_length, where))
    return prompts


def plan(model: ir.Model, input_shapes: Sequence[Sequence[int | str | None]],
         given: Mapping[str, int], sizes: Mapping[str, int] | None = None,
         held: Collection[str] = (), anonymous: AxisNames | None = None,
         batches: Collection[str] = (), light: onnx.ModelProto | None = None,
         analysed: bool = False) -> DimPlan:
    """Bindings of the named dims of ``input_shapes`` (onnxruntime's view of the inputs):
    ``given`` as is, the ones the graph relates computed (read by the check's own walk,
    :mod:`onnxfold.check.inputs.graph_dims`), the others guessed (see module): ``sizes``
    (an image's height and width) where it names them, ``held`` (a cache's length) kept at
    the profile's cache length, and
    ``batches`` (besides the dims on axis 0) at the profile's batch. ``anonymous``: the name
    ``input_shapes`` gives each dim the model leaves unnamed (``?``, none, -1) by graph input
    and axis, so that the graph's relations read it as they read a named one. ``light``:
    ``model`` as ``shapes.serialize_light`` gives it, where the caller has it (its inference
    takes it: not serialized again); ``analysed``: ``model``'s values already carry their
    inferred types (an optimized model, as its run left it): not inferred again."""
    sizes = sizes or {}
    names = {d for shape in input_shapes for d in shape if is_named(d)}
    axis_names: dict[tuple[str, int], str] = dict(anonymous or {})
    for value in model.graph.inputs:
        for i, dim in enumerate(value.shape or ()):
            if value.name and is_named(label := getattr(dim, "value", None)):
                axis_names[(value.name, i)] = label
    relations = _Relations(names, axis_names)
    for name in sorted(names):
        form = parse(name)
        if form is not None and form != {name: 1} and set(form) - {""} <= names:
            relations.equations[name] = (form, "declared by the input")
    prompts: list[OneBatchPrompt] = []
    try:
        if not analysed:
            infer_shapes(model, light)
        known = GraphDims(model, axis_names)
        prompts = _attention_relations(model, relations)
        _index_relations(model, known, relations)
        _broadcast_relations(model, known, relations)
    except Exception:  # relations are an aid: a graph they cannot be read from keeps guesses
        pass
    on_axis0 = {shape[0] for shape in input_shapes if shape and is_named(shape[0])} | \
        (set(batches) & names)
    backwards = _solved_backwards(given, relations.equations)
    given = {**given, **{name: value for name, (value, _) in backwards.items()}}
    free = sorted(n for n in names if n not in given and n not in relations.equations)
    cache = frozenset(held) & set(free)

    def binding(profile: Profile, sized: bool = True) -> dict[str, int]:
        """``given``, the free dims as ``profile`` sets them (images' sides only where
        ``sized``: a larger guess sets every length alike), the related computed."""
        chosen = {name: profile.side if sized and name in sizes else
                  profile.batch if name in on_axis0 else
                  profile.held if name in cache else profile.width for name in free}
        return one_batch(settle(chosen, given, relations.equations, names, cache)[0],
                         prompts, free)

    def group(chosen: Sequence[Profile], sized: bool = True) -> list[Bound]:
        found: list[Bound] = []
        for profile in chosen:
            candidate = Bound(binding(profile, sized), profile)
            if all(candidate.dims != other.dims for other in found):
                found.append(candidate)
        return found

    base = group(profiles())
    # A length the graph relates to others in a way not read here (a mask read through a
    # flattened b*total + position index) is most often a sum of two of them: past + seq.
    first = base[0].dims
    lengths = [name for name in free if name not in on_axis0 and first[name] > 1]
    summed: list[list[Bound]] = []
    if len(lengths) >= 3:
        for name in lengths:
            twice = {n: 2 * first[n] if n == name else first[n] for n in free}
            summed.append([Bound(settle(twice, given, relations.equations, names, cache,
                                        keep={name})[0], base[0].profile)])
    larger = summed + ([group(longer(width), sized=False) for width in LARGER]
                       if set(free) - on_axis0 else [])
    derived = {name: f"{_text(form)} ({where})" for name, (form, where)
               in relations.equations.items() if name not in given}
    derived.update({name: f"{value} (from {how})" for name, (value, how) in backwards.items()})
    forms = {name: form for name, (form, _) in relations.equations.items()}
    smaller = [group(profiles(side=side)) for side in SMALLER_IMAGES] \
        if set(sizes) & set(free) else []
    lengthy = bool(set(free) - on_axis0)
    return DimPlan(base, derived, free, forms, larger, smaller,
                   frozenset(on_axis0) & set(free), frozenset(sizes) & set(free),
                   frozenset(given), cache,
                   aligned=lambda multiple: group(aligned(multiple)) if lengthy else [],
                   prompts=prompts)


def one_batch(dims: dict[str, int], prompts: Sequence[OneBatchPrompt],
              guessed: Collection[str]) -> dict[str, int]:
    """``dims`` with a guessed batch set to 1 where ``prompts`` need it (several new tokens
    after a past: :class:`OneBatchPrompt`)."""
    for prompt in prompts:
        if not prompt.held(dims) and prompt.batch in guessed:
            dims = {**dims, prompt.batch: 1}
    return dims


def _solved_backwards(given: Mapping[str, int], equations: Mapping[str, tuple[Linear, str]]
                      ) -> dict[str, tuple[int, str]]:
    """Dims that given ones fix through a relation: a given total and sequence give the past
    (``total = past + seq``), so that a binding never contradicts what the user gave."""
    known = dict(given)
    solved: dict[str, tuple[int, str]] = {}
    progress = True
    while progress:
        progress = False
        for target, (form, _) in equations.items():
            unknown = [k for k in form if k and k not in known]
            if target not in known or len(unknown) != 1 or form[unknown[0]] not in (1, -1):
                continue
            rest = sum(v * (known[k] if k else 1) for k, v in form.items() if k != unknown[0])
            value = (known[target] - rest) * form[unknown[0]]
            if value >= 1:
                known[unknown[0]] = value
                solved[unknown[0]] = (value, f"{target} = {_text(form)}")
                progress = True
    return solved


def settle(free: Mapping[str, int], given: Mapping[str, int],
           equations: Mapping[str, tuple[Linear, str]], names: Collection[str],
           held: Collection[str] = (), keep: Collection[str] = ()
           ) -> tuple[dict[str, int], str]:
    """A binding of ``names``: ``given`` as they are, the guessed dims ``free`` as chosen,
    the related ones computed. Where a relation's target is given (a mask's length fixed at
    32 = past + sequence) and the chosen dims compute another value, one guessed dim of the
    relation takes up the difference: a cache's length (``held``) first, a dim of ``keep``
    (the ones a variant doubled) last. Returns the binding and, where no guessed dim can keep
    a given one, which relation it breaks (the binding is then as chosen: onnxruntime
    decides)."""
    chosen = dict(free)
    broken = ""
    for _ in range(len(equations) + 1):
        bound = {**given, **chosen}
        _solve(bound, equations, set(names))
        broken = next((f"{target}={given[target]} ({target} = {_text(form)})"
                       for target, (form, _) in equations.items() if target in given and
                       _evaluate(form, bound) != given[target]), "")
        if not broken:
            return bound, ""
        target = broken.split("=", 1)[0]
        form = equations[target][0]
        adjustable = sorted((k for k in form if k in chosen and form[k] in (1, -1)),
                            key=lambda k: (k in keep, k not in held, -chosen[k], k))
        for name in adjustable:
            rest = _evaluate({k: v for k, v in form.items() if k != name}, bound)
            value = (given[target] - rest) * form[name]
            if value >= 1 and value != chosen[name]:
                chosen[name] = value
                break
        else:
            break
    bound = {**given, **free}
    _solve(bound, equations, set(names))
    return bound, broken


def _evaluate(form: Linear, binding: Mapping[str, int]) -> int:
    """``form`` at ``binding`` (a dim it does not bind counts 1)."""
    return sum(v * (binding.get(k, 1) if k else 1) for k, v in form.items())


def _solve(binding: dict[str, int], equations: Mapping[str, tuple[Linear, str]],
           names: set[str]) -> None:
    """Compute every derived dim whose expression's dims are bound (in dependency order);
    a dim left unresolvable, or below 1, is 1."""
    pending = {n: form for n, (form, _) in equations.items() if n not in binding}
    while pending:
        progress = False
        for name, form in list(pending.items()):
            if all(k == "" or k in binding for k in form):
                value = sum(v * (binding[k] if k else 1) for k, v in form.items())
                binding[name] = max(value, 1)
                del pending[name]
                progress = True
        if not progress:
            for name in pending:
                binding[name] = 1
            break
    for name in names:
        binding.setdefault(name, 1)
