"""The leaf layer: graph walks, constant data, edits, arrays, dtypes, protos and slicing over
onnx-ir (it imports no other onnxfold layer)."""
