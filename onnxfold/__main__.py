from onnxfold.app.cli import entry_point

entry_point()
