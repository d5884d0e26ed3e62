"""Folding: the graph folder, the buffer pool, the size policy and budget, float16 handling, the
onnxruntime fallback and function bodies.
"""
