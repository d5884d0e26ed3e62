from onnxfold.cli import entry_point

entry_point()
