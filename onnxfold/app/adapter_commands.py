"""``onnxfold split-adapter MODEL -o BASE --adapter FILE.onnx_adapter``: a model exported with
its LoRA adapter inside split into a base model with the LoRA weights as inputs and an
onnxruntime adapter file (``onnxfold.runtime.adapter_split``).

Both outputs are claimed before anything is read (neither may replace the model or a file it
reads, nor each other), written beside their targets and renamed in place: the base model by
the streaming writer, the adapter file by onnxruntime's ``AdapterFormat`` into a temporary file
of the pinned directory. The base model is written first and the adapter file second; a run
stopped between them leaves no adapter file, never one that does not fit the base model.
"""

from __future__ import annotations

import os

from onnxfold.app.commands import SplitAdapterCommand


def split_adapter(command: SplitAdapterCommand) -> int:
    """Split the model (``onnxfold.split_adapter``: the same claims, the same checks), say
    what was found and how to run it."""
    from onnxfold.runtime.adapter_split import split_adapter as split

    found = split(command.source, command.output, command.adapter, check=command.check_input)
    print(f"found        {found.summary()}")
    print(f"wrote        {command.output} ({os.path.getsize(command.output) / 2**20:.1f} MiB): "
          "the model, its LoRA weights as inputs (zeros by default: run alone, it is the "
          "base model)")
    print(f"wrote        {command.adapter} ({os.path.getsize(command.adapter) / 2**20:.2f} MiB, "
          f"{len(found.arrays)} tensors by those inputs' names)")
    print(f'run it       onnxfold.Session("{command.output}", adapter="{command.adapter}") '
          "merges them into their base weights")
    return 0
