"""The parts of ``bench/bench_fold.py`` (the driver): one module per job.

===========  ==============================================================================
runner       one measured child process (wall, CPU, peak RSS via ``os.wait4``, timeout)
peers        how each tool is invoked, and which peers import in ``--peers-python``
checks       the analysis children: input/output stats, reference outputs, accuracy
machine      what the header says about the machine and the interpreters
measure      one model: every tool ``--repeat`` times, its outputs checked, onnxfold / peer
render       results.md and results.svg
===========  ==============================================================================

The benchmark's parent process stays small (Linux carries its RSS high-water mark into every
child at ``exec``): nothing here imports numpy, onnx or onnxruntime at module level.
"""

MiB = 1 << 20
SEED = 0
