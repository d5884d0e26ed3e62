"""Fold the same models with two commits of onnxfold and compare the outputs byte for byte.

    python -m tools.compare_commits BASE HEAD [--fuzz-seeds N] [--no-wild] [--no-models]
                                    [--no-exports] [--timing] [--model PATH ...] [--repo DIR]

Each commit is checked out on its own (``git worktree add --detach`` into a temporary directory,
removed at the end) and runs in one long-lived process (``tools/commit_worker.py``) that imports
onnxfold from that checkout and folds through the public API only, so that commits with
different module layouts compare. Both processes fold each input at the same time; their outputs
(the .onnx file and any external-data file beside it) are compared byte for byte. Only commits
are compared: uncommitted changes are not part of either side.

Inputs and option sets: ``tools.compare_inputs``. The summary counts inputs x option sets that
are identical, different, failed on both the same way (same exception type and message) or
failed differently, names the first differences, and exits 1 if any output differs or fails
differently (2 on bad arguments). ``--timing`` then folds each wild-corpus model 3 times per
commit, A/B interleaved in the same run, and prints the median per model and the ratio
HEAD/BASE of their sums.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tools import compare_inputs
from tools.compare_inputs import Input

WORKER = Path(__file__).with_name("commit_worker.py")
TIMEOUT = 600.0  # seconds for one fold before the worker is restarted
SHOWN = 10  # differences named in the summary (all with --show-all)
REPEATS = 3  # folds per model and commit with --timing


class UsageError(Exception):
    """Bad arguments: one line, exit 2."""


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip()
                         else f"git {' '.join(args)} failed")
    return proc.stdout.strip()


@contextlib.contextmanager
def checkout(root: Path, commit: str, where: Path) -> Iterator[Path]:
    """A detached worktree of ``commit`` at ``where``, removed on exit."""
    git(root, "worktree", "add", "--quiet", "--detach", str(where), commit)
    try:
        yield where
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=root,
                       capture_output=True)
        shutil.rmtree(where, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=root, capture_output=True)


def resolve(root: Path, rev: str) -> str:
    try:
        return git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except UsageError:
        raise UsageError(f"not a commit: {rev}") from None


class Worker:
    """The fold process of one checkout; restarted when it dies or hangs."""

    def __init__(self, label: str, tree: Path, log_path: Path) -> None:
        self.label, self.tree, self.log_path = label, tree, log_path
        self.origin = ""
        self._start()

    def _start(self) -> None:
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), str(self.tree)], cwd=self.tree, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
        finally:
            os.close(log)  # the worker holds its own copy
        hello = self._read(120.0)
        if hello is None or "onnxfold" not in hello:
            self._stop()
            raise RuntimeError(f"{self.label}: the worker did not start (log: {self.log_path})")
        self.origin = str(hello["onnxfold"])

    def _stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()

    def _read(self, timeout: float) -> dict | None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def send(self, src: Path, out: Path, options: dict[str, object]) -> None:
        assert self.proc.stdin is not None
        request = {"src": str(src), "out": str(out), "options": options}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> dict:
        answer = self._read(TIMEOUT)
        if answer is not None:
            return answer
        timed_out = self.proc.poll() is None
        self._stop()
        self._start()
        return {"ok": False, "error": "timeout" if timed_out else "worker died"}

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Outcome:
    name: str  # input and option set
    verdict: str  # identical, different, failed-same, failed-differently
    detail: str = ""


def output_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def judge(name: str, answers: tuple[dict, dict], dirs: tuple[Path, Path]) -> Outcome:
    """Compare what the two commits wrote (or why they failed)."""
    a, b = answers
    if not a["ok"] or not b["ok"]:
        if not a["ok"] and not b["ok"] and a["error"] == b["error"]:
            return Outcome(name, "failed-same", a["error"])
        return Outcome(name, "failed-differently",
                       f"BASE: {a.get('error', 'ok')}; HEAD: {b.get('error', 'ok')}")
    files_a, files_b = output_files(dirs[0]), output_files(dirs[1])
    if files_a == files_b:
        return Outcome(name, "identical")
    what = []
    for file in sorted(set(files_a) | set(files_b)):
        kind = "graph" if file.endswith(".onnx") else "external data"
        if file not in files_a or file not in files_b:
            what.append(f"{kind} {file} written by {'HEAD' if file in files_b else 'BASE'} only")
        elif files_a[file] != files_b[file]:
            what.append(f"{kind} {file} differs ({len(files_a[file])} vs "
                        f"{len(files_b[file])} bytes)")
    return Outcome(name, "different", "; ".join(what))


def compare_all(workers: tuple[Worker, Worker], jobs: list[tuple[str, Path, dict]],
                scratch: Path, progress) -> list[Outcome]:
    outcomes = []
    last = time.monotonic()
    for index, (name, src, options) in enumerate(jobs):
        dirs = (scratch / "a", scratch / "b")
        for directory, worker in zip(dirs, workers):
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            worker.send(src, directory / "model.onnx", options)
        answers = (workers[0].receive(), workers[1].receive())
        outcomes.append(judge(name, answers, dirs))
        if time.monotonic() - last > 30:
            last = time.monotonic()
            progress(f"  {index + 1}/{len(jobs)} folded")
    for directory in (scratch / "a", scratch / "b"):
        shutil.rmtree(directory, ignore_errors=True)
    return outcomes


def timing(workers: tuple[Worker, Worker], models: list[Input], scratch: Path) -> list[str]:
    """Fold time per wild model, A/B interleaved (order alternating), medians of REPEATS."""
    seconds: dict[str, tuple[list[float], list[float]]] = {
        m.name: ([], []) for m in models}
    for repeat in range(REPEATS):
        for index, model in enumerate(models):
            order = (0, 1) if (repeat + index) % 2 == 0 else (1, 0)
            for side in order:
                out = scratch / f"t{side}"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir(parents=True)
                workers[side].send(model.path, out / "model.onnx", compare_inputs.DEFAULT)
                answer = workers[side].receive()
                if answer["ok"]:
                    seconds[model.name][side].append(float(answer["seconds"]))
    lines = [f"{'model':32} {'BASE s':>8} {'HEAD s':>8} {'ratio':>6}"]
    total = [0.0, 0.0]
    for name, (base, head) in seconds.items():
        if not base or not head:
            lines.append(f"{name:32} failed")
            continue
        mb, mh = statistics.median(base), statistics.median(head)
        total[0] += mb
        total[1] += mh
        lines.append(f"{name:32} {mb:8.3f} {mh:8.3f} {mh / mb:6.2f}")
    if total[0]:
        lines.append(f"{'total (sum of medians)':32} {total[0]:8.3f} {total[1]:8.3f} "
                     f"{total[1] / total[0]:6.2f}")
    return lines


def summary(outcomes: list[Outcome], shown: int = SHOWN) -> list[str]:
    counts = Counter(o.verdict for o in outcomes)
    lines = [f"{len(outcomes)} folds: " + ", ".join(
        f"{counts.get(v, 0)} {v}" for v in
        ("identical", "different", "failed-same", "failed-differently"))]
    bad = [o for o in outcomes if o.verdict in ("different", "failed-differently")]
    lines += [f"  {o.verdict}: {o.name}: {o.detail}" for o in bad[:shown]]
    if len(bad) > shown:
        lines.append(f"  ... and {len(bad) - shown} more (--show-all names them)")
    same = Counter(o.detail for o in outcomes if o.verdict == "failed-same")
    for error, count in same.most_common(3):
        lines.append(f"  failed on both ({count}): {error[:160]}")
    return lines


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tools.compare_commits",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the commit before (any git revision)")
    parser.add_argument("head", help="the commit after")
    parser.add_argument("--fuzz-seeds", type=int, default=0, metavar="N",
                        help="also fold fuzz graphs of seeds 0..N-1 (default 0)")
    parser.add_argument("--no-wild", action="store_true", help="skip the wild corpus")
    parser.add_argument("--no-models", action="store_true",
                        help="skip the models tier (models/*.onnx and the exports)")
    parser.add_argument("--no-exports", action="store_true",
                        help="skip the tests/exports models (torch exports, built once)")
    parser.add_argument("--model", action="append", default=[], type=Path, metavar="PATH",
                        help="also fold this model (default options; repeatable)")
    parser.add_argument("--repo", type=Path, default=Path.cwd(),
                        help="the git repository the commits are in (default: the current one)")
    parser.add_argument("--show-all", action="store_true",
                        help=f"name every difference (default: the first {SHOWN})")
    parser.add_argument("--timing", action="store_true",
                        help="also time each wild model's fold, A/B interleaved, medians of 3")
    args = parser.parse_args(argv)
    if args.fuzz_seeds < 0:
        parser.error("--fuzz-seeds must be >= 0")
    return args


def gather(args: argparse.Namespace, root: Path, scratch: Path, log) -> list[Input]:
    inputs = [Input(f"model/{path.name}", path.resolve(), ()) for path in args.model]
    missing = [str(path) for path in args.model if not path.is_file()]
    if missing:
        raise UsageError(f"no such model: {missing[0]}")
    if not args.no_models:
        inputs += compare_inputs.models_tier(root)
        if not args.no_exports:
            inputs += compare_inputs.exports(root, log)
    wild = [] if args.no_wild else compare_inputs.wild(log)
    inputs += wild
    if args.fuzz_seeds:
        log(f"generating {args.fuzz_seeds} fuzz graphs")
        inputs += compare_inputs.fuzz(args.fuzz_seeds, scratch / "fuzz")
    return inputs


def jobs_of(inputs: list[Input]) -> list[tuple[str, Path, dict]]:
    jobs: list[tuple[str, Path, dict]] = []
    for item in inputs:
        jobs.append((item.name, item.path, compare_inputs.DEFAULT))
        jobs += [(f"{item.name} [{variant}]", item.path, compare_inputs.VARIANTS[variant])
                 for variant in item.variants]
    return jobs


def run(args: argparse.Namespace) -> int:
    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if not args.repo.is_dir():
        raise UsageError(f"no such directory: {args.repo}")
    root = Path(git(args.repo, "rev-parse", "--show-toplevel"))
    commits = [resolve(root, rev) for rev in (args.base, args.head)]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onnxfold-compare-") as tmp:
        scratch = Path(tmp)
        inputs = gather(args, root, scratch, log)
        jobs = jobs_of(inputs)
        with checkout(root, commits[0], scratch / "base") as base, \
                checkout(root, commits[1], scratch / "head") as head:
            workers = (Worker("BASE", base, scratch / "base.log"),
                       Worker("HEAD", head, scratch / "head.log"))
            try:
                for label, rev, commit, worker in zip(("BASE", "HEAD"), (args.base, args.head),
                                                      commits, workers):
                    print(f"{label} {rev} = {commit[:12]}: onnxfold from {worker.origin}")
                print(f"{len(inputs)} inputs, {len(jobs)} folds per commit", flush=True)
                outcomes = compare_all(workers, jobs, scratch / "out", log)
                lines = summary(outcomes, len(outcomes) if args.show_all else SHOWN)
                if args.timing:
                    wild = [i for i in inputs if i.name.startswith("wild/")]
                    lines += timing(workers, wild, scratch / "out") if wild else \
                        ["--timing: no wild-corpus model to time"]
            finally:
                for worker in workers:
                    worker.close()
    print("\n".join(lines))
    print(f"wall time {time.monotonic() - started:.0f} s")
    failed = any(o.verdict in ("different", "failed-differently") for o in outcomes)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return run(args)
    except UsageError as error:
        print(f"compare_commits: error: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:
        print(f"compare_commits: internal error: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
