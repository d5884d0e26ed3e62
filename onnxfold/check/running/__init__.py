"""The check's floor: running models. The models read as graphs and their sessions, the
check's own onnxruntime runner, the memory it may take, the original's cones, and the chain a
model too large for one session runs as. What it feeds them is ``inputs``', how their values
are judged ``judging``'s; nothing here imports either, nor anything of the fold's."""
