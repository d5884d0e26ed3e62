"""sympy is imported only when something uses it, and works as usual then."""


from tests.support.cli import run_python


def _run(code: str) -> str:
    done = run_python("-c", code, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_onnxfold_does_not_import_sympy():
    assert _run("import onnxfold.app.cli, sys; print('sympy.core' in sys.modules)") == "False"


def test_symbolic_dims_still_compute_after_the_deferred_import():
    out = _run("import onnxfold, onnx_ir as ir\n"
               "d = ir.SymbolicDim('N')\n"
               "print(d * 2 + ir.SymbolicDim('max(M, 3)'))\n"
               "import sympy; print(sympy.Symbol('x') + 1)")
    assert out.splitlines() == ["2*N + Max(3, M)", "x + 1"]


def test_sympy_imported_first_is_left_alone():
    out = _run("import sympy, onnxfold, sys\n"
               "print(sys.modules['sympy'] is sympy, type(sympy).__name__)")
    assert out == "True module"


def test_public_names_resolve_on_first_use():
    out = _run("import onnxfold, sys\n"
               "print('onnxfold.runtime.session' in sys.modules)\n"
               "import onnxfold.app.cli, onnxfold.check.compare, onnxfold.runtime.split\n"
               "names = sorted(set(onnxfold.__all__) - {'__version__'})\n"
               "homes = {getattr(onnxfold, n).__module__ for n in names}\n"
               "print(all(h.startswith('onnxfold.') for h in homes))\n"
               "print(names == sorted(onnxfold._HOMES), callable(onnxfold.compare))")
    assert out.splitlines() == ["False", "True", "True True"]


def test_import_statements_of_sympy_after_onnxfold_do_not_load_it():
    """What onnx-ir's own ``import sympy`` does when onnx_ir is imported after onnxfold (the
    reason the placeholders are not ``importlib.util.LazyLoader`` modules, which that
    statement would load)."""
    out = _run("import onnxfold, sys\n"
               "import sympy, onnx_ir, onnx_ir._symbolic_shapes\n"
               "print('sympy.core' in sys.modules)")
    assert out == "False"
