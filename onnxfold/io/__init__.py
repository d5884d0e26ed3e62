"""Model I/O: memory-mapped loading and streaming, atomic saving."""

from onnxfold.io.reader import load_model
from onnxfold.io.writer import save_model

__all__ = ["load_model", "save_model"]
