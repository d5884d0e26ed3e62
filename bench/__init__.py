"""onnxfold's benchmarks: one runner (``python -m bench run NAME ...``), the models they build
(``bench.builders``), one measured-child helper (``bench.process``) and the tools' command lines
(``bench.tools``). Results go into ``bench/README.md``."""
