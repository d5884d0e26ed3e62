"""``onnxfold split-adapter MODEL -o BASE --adapter FILE.onnx_adapter``: a model exported with
its LoRA adapter in it, split into a base model whose LoRA weights are graph inputs and an
onnxruntime adapter file holding them; ``Session(BASE, adapter=FILE)`` then computes what the
model computes, at the merged model's speed (``rules/low_rank.py`` merges the branches).

A PEFT model exports with each adapter's weights as initializers, under names that tell what
they are only sometimes: dynamo's exporter keeps peft's parameter names
(``...q_proj.lora_A.default.weight``, any adapter name in place of ``default``) unless its
optimizer folded a weight into a new one; TorchScript's constant folding renames them
(``onnx::MatMul_28``, the weight transposed). So the LoRA weights are found two ways:

- **by name**: an initializer whose name holds ``lora_A`` / ``lora_B`` (peft's, and Olive's);
- **by structure**: the weights of two products in a row (MatMul, Gemm or Conv, through
  scalings, Identity nodes and Transposes) beside a base product of the same input, a sum of
  the two: ``x @ W + s * (x @ A) @ B``. Candidates are every such pair of weights; the ones
  kept are those the Session's own merge rule merges once they are inputs (tried on a copy of
  the model), so what is lifted is exactly what a Session will fold into its base weights.

Each found weight becomes a graph input of the same name, type and shape whose default is
zeros (the base model run alone computes the base model), and its array goes to the adapter
file under that name: the base model computes, fed those arrays, what the model computed with
them inside. Several adapters for one base must
share its ranks and scalings (the base keeps the scaling), as onnxruntime's multi-LoRA asks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import onnx_ir as ir

from onnxfold.declare.catalogue import Catalogue
from onnxfold.errors import InputError
from onnxfold.host.points import reached
from onnxfold.io.door import claimed
from onnxfold.io.writer import input_files
from onnxfold.ir.graph import through_identities
from onnxfold.pipeline.options import FoldOptions
from onnxfold.runtime.adapters import write_adapter
from onnxfold.runtime.reassociate import merge_low_rank_branches

LORA_NAME = re.compile(r"lora_[AB]\b|lora_[AB](?=[._])")  # peft: "...lora_A.default.weight"
PRODUCTS = ("MatMul", "Gemm", "Conv")
PASS_THROUGH = ("Identity", "Transpose", "Cast", "Dropout")  # between a weight and its product
MAX_HOPS = 8


@dataclass
class AdapterSplit:
    """What splitting found: the lifted weights by name (their arrays, the adapter file's
    content), how each was found, and the named weights no Session merges (they still feed
    the base model: correct, at the unmerged speed)."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    by_name: list[str] = field(default_factory=list)
    by_structure: list[str] = field(default_factory=list)
    unmerged: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what was lifted and how it was found."""
        size = sum(a.nbytes for a in self.arrays.values())
        line = (f"{len(self.arrays)} LoRA weights lifted to inputs ({len(self.by_name)} by "
                f"peft's names, {len(self.by_structure)} by their low-rank structure), "
                f"{size / 2**20:.2f} MiB")
        if self.unmerged:
            line += (f"; {len(self.unmerged)} named LoRA weights do not merge into a base "
                     f"weight (the Session runs them unmerged): {', '.join(self.unmerged[:3])}")
        return line


def split_adapter(model: str | os.PathLike | ir.Model, base: str | os.PathLike,
                  adapter: str | os.PathLike, *, catalogue: Catalogue | None = None,
                  check: bool = True) -> AdapterSplit:
    """``onnxfold split-adapter`` (which calls this): ``model`` (a path, read with onnx's
    checker unless ``check=False``, or an ``ir.Model``, changed in place) split into the base
    model written at ``base`` and the adapter file at ``adapter`` (the base model first: a
    run stopped between them leaves no adapter file). Both are claimed first
    (``onnxfold.io.door``): neither may replace the model, a file its weights are read from,
    or the other. What was lifted is returned."""
    from onnxfold.declare.catalogue import load_catalogue
    from onnxfold.io import load_model, save_model

    path = None if isinstance(model, ir.Model) else os.fspath(model)
    guard = claimed([(base, "base model"), (adapter, "adapter file")],  # its data: once read
                    [path] if path else input_files(cast(ir.Model, model)))
    try:
        loaded = model if isinstance(model, ir.Model) else load_model(model, check=check)
        guard.protect(input_files(loaded))  # what it read (also what changed since the claim)
        reached("loaded")
        found = lift_lora_weights(loaded, load_catalogue() if catalogue is None else catalogue,
                                  path or "model")
        save_model(loaded, guard.pinned(base), guard=guard)
        write_adapter(found.arrays, guard.pinned(adapter))
    finally:
        guard.close()
    return found


def lift_lora_weights(model: ir.Model, catalogue: Catalogue, label: str = "model"
                      ) -> AdapterSplit:
    """Lift ``model``'s LoRA weights to graph inputs, in place; what was lifted. InputError
    when it holds none."""
    initializers = model.graph.initializers
    named = [name for name in initializers if LORA_NAME.search(name)]
    paired = sorted(set(_paired_weights(model.graph)) - set(named))
    merging = _merging(model, [*named, *paired], catalogue)
    found = AdapterSplit(by_name=named, by_structure=[n for n in paired if n in merging],
                         unmerged=[n for n in named if n not in merging])
    if not found.by_name and not found.by_structure:
        raise InputError(f"{label}: no LoRA weight found: none is named lora_A or lora_B, and "
                         "no pair of weights is a low-rank branch beside a base product "
                         "(x @ W + s * (x @ A) @ B); was the adapter merged into the model "
                         "(peft's merge_and_unload) before the export?")
    for name in [*found.by_name, *found.by_structure]:
        value = initializers[name]
        assert value.const_value is not None
        found.arrays[name] = np.array(value.const_value.numpy())
        _lift(model.graph, value)
    return found


def _lift(graph: ir.Graph, value: ir.Value, keep_default: bool = True) -> None:
    """The initializer ``value`` made a graph input of the same name, type and shape (once:
    TorchScript's ``keep_initializers_as_inputs`` lists it there already). Its default
    (``keep_default``) is zeros: onnxruntime's multi-LoRA (``RunOptions.add_active_adapter``)
    feeds only inputs that have one, and the base model run alone computes the base model
    (a branch of zeros adds nothing), not the adapter it was split from."""
    tensor = value.const_value
    assert tensor is not None
    if keep_default:
        value.const_value = ir.Tensor(np.zeros(tensor.shape.numpy(), tensor.dtype.numpy()),
                                      name=str(value.name))
    else:
        graph.initializers.pop(str(value.name))
        value.const_value = None
    value.dtype, value.shape = tensor.dtype, ir.Shape(tensor.shape.numpy())
    if value not in graph.inputs:
        graph.inputs.append(value)


def _merging(model: ir.Model, names: list[str], catalogue: Catalogue) -> set[str]:
    """Which of the initializers ``names`` a Session's low-rank merge takes into a base weight
    once they are inputs: tried on a copy; a weight merged when no node that read it is left
    (the merge removes a branch's products)."""
    if not names:
        return set()
    copy = model.clone()
    lifted = [copy.graph.initializers[name] for name in names]
    readers = {str(v.name): [use.node for use in v.uses()] for v in lifted}
    for value in lifted:
        _lift(copy.graph, value, keep_default=False)
    merge_low_rank_branches(copy, lifted, catalogue, FoldOptions())
    return {name for name, nodes in readers.items() if all(n.graph is None for n in nodes)}


def _paired_weights(graph: ir.Graph) -> Iterator[str]:
    """The initializers that are the weights of two products in a row (the second reading
    the first through scalings and Identity nodes): the candidates for A and B."""
    for node in graph:
        if node.op_type not in PRODUCTS or len(node.inputs) < 2 or node.inputs[0] is None:
            continue
        second = _weight(node)
        first_node = _producer_through(node.inputs[0])
        if second is None or first_node is None or first_node.op_type not in PRODUCTS:
            continue
        first = _weight(first_node)
        if first is not None and first != second:
            yield first
            yield second


def _weight(node: ir.Node) -> str | None:
    """The initializer a product's second input is, through Identity, Transpose, Cast and
    Dropout nodes."""
    value = node.inputs[1]
    for _ in range(MAX_HOPS):
        if value is None:
            return None
        value = list(through_identities(value))[-1]
        if value.is_initializer():
            return value.name
        producer = value.producer()
        if producer is None or producer.op_type not in PASS_THROUGH or not producer.inputs:
            return None
        value = producer.inputs[0]
    return None


def _producer_through(value: ir.Value) -> ir.Node | None:
    """The node computing ``value``, through scalings by one operand (Mul, Div), Identity
    nodes and Dropouts."""
    for _ in range(MAX_HOPS):
        node = value.producer()
        if node is None or node.op_type not in ("Mul", "Div", "Identity", "Dropout", "Cast"):
            return node
        nxt = _dynamic_input(node.inputs)
        if nxt is None:
            return None
        value = nxt
    return None


def _dynamic_input(inputs: Iterable[ir.Value | None]) -> ir.Value | None:
    """The first input computed by a node other than a Constant (a scaling's other operand
    is a constant)."""
    for value in inputs:
        producer = value.producer() if value is not None else None
        if value is not None and producer is not None and producer.op_type != "Constant":
            return value
    return None
