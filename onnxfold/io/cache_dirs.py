"""Cache directories onnxfold trusts for hits: absolute, the user's own, writable by no one else.

What a cache holds is used as if onnxfold had just computed it: the IREE backend's compiled
modules are native code that runs in this process, ``Session``'s folded tensors become the
model's weights. So a cache directory is used only when

- its path is absolute (an empty or relative ``XDG_CACHE_HOME`` would otherwise put the cache
  under whatever the current directory happens to be; an empty one means unset, as the XDG
  base-directory specification says, so ``~/.cache``);
- it is a directory owned by the current user and not writable by group or others;
- every directory above it is owned by the user or root and not writable by group or others,
  unless it is sticky (``/tmp``): otherwise another user could rename it away and put theirs
  in its place.

A directory that fails is not used at all, neither read nor written: the work is done again
each time, and one :class:`UntrustedCacheWarning` says why. Missing directories are created
with mode 0700.
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings


class UntrustedCacheWarning(UserWarning):
    """A cache directory was refused (see the module docstring); the run goes on without it."""


def user_cache_home() -> str:
    """``$XDG_CACHE_HOME``, or ``~/.cache`` when it is unset or empty (not checked here)."""
    return os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")


def _writable_by_others(info: os.stat_result) -> bool:
    return bool(info.st_mode & 0o022)


def cache_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be trusted as a cache directory, or None when it can (or, missing,
    could be created where no one else can replace it)."""
    if not os.path.isabs(path):
        return "not an absolute path"
    uid = os.getuid() if hasattr(os, "getuid") else None
    current, leaf = os.path.normpath(path), True
    while True:
        try:
            info = os.stat(current)
        except FileNotFoundError:
            info = None
        except OSError as e:
            return f"{current}: cannot check it ({e.strerror})"
        if info is not None:
            if not stat.S_ISDIR(info.st_mode):
                return f"{current} is not a directory"
            if leaf:
                if uid is not None and info.st_uid != uid:
                    return f"owned by uid {info.st_uid}, not by this user ({uid})"
                if _writable_by_others(info):
                    return f"writable by group or others: mode {stat.S_IMODE(info.st_mode):o}"
            elif uid is not None and info.st_uid not in (uid, 0):
                return f"{current} above it is owned by uid {info.st_uid}"
            elif _writable_by_others(info) and not info.st_mode & stat.S_ISVTX:
                return f"{current} above it is writable by group or others"
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current, leaf = parent, False


def trusted_cache_dir(path: str | os.PathLike, what: str) -> str | None:
    """``path`` when it may be used as the cache for ``what``; else None after one
    :class:`UntrustedCacheWarning`."""
    path = os.fspath(path)
    problem = cache_dir_problem(path)
    if problem is None:
        return path
    warnings.warn(f"onnxfold: {what} {path!r} not used ({problem}); running without a cache",
                  UntrustedCacheWarning, stacklevel=3)
    return None


def make_cache_dir(path: str) -> bool:
    """Create ``path`` (and missing parents) with mode 0700; whether it is now a trusted cache
    directory (a failure to create it is only a slower run)."""
    missing = []
    current = os.path.normpath(path)
    while not os.path.lexists(current) and os.path.dirname(current) != current:
        missing.append(current)
        current = os.path.dirname(current)
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            try:
                os.mkdir(directory, 0o700)
            except OSError:
                return False
    return cache_dir_problem(path) is None
