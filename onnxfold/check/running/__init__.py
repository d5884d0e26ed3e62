"""The check's floor: the models and their sessions, the feeds, the check's own onnxruntime
runner, the memory it may take, the tolerances and the original's cones. Everything above
(outputs, folds, rewrites) runs onnxruntime through it and nothing of the fold's."""
