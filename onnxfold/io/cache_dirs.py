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

:func:`directory_key` gives a trusted directory its secret: 32 random bytes in ``.onnxfold-key``
(mode 0600, the user's, a regular file: one that is not is replaced), with which a cache
authenticates its entries (an HMAC): an entry edited and digested again without the key, or
copied from another directory, does not verify.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import warnings

from onnxfold.errors import OnnxfoldError, OutputError
from onnxfold.io.opener import open_regular
from onnxfold.io.pinned import PinnedDirectory
from onnxfold.io.tempfiles import temporary

KEY_NAME = ".onnxfold-key"
KEY_BYTES = 32


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
    # as named, and as reached through any link on the way: a link's directory may be
    # trusted where the directory it leads to is not (and the other way round)
    for chain in dict.fromkeys((os.path.normpath(path), os.path.realpath(path))):
        problem = _chain_problem(chain)
        if problem is not None:
            return problem
    return None


def _chain_problem(path: str) -> str | None:
    """Why ``path`` and the directories above it (each as ``stat`` reaches it) are no
    trusted cache directory, or None."""
    uid = os.getuid() if hasattr(os, "getuid") else None
    current, leaf = path, True
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


def _read_key(directory: PinnedDirectory) -> bytes | None:
    """The directory's key when it is one: a regular file of this user's that no one else
    may read, of :data:`KEY_BYTES` bytes (never through a symbolic link)."""
    try:  # never a link, never a FIFO waited on (onnxfold.io.opener)
        fd = open_regular(KEY_NAME, dir_fd=directory.fd, follow=False)
    except (OSError, OnnxfoldError):
        return None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        uid = os.getuid() if hasattr(os, "getuid") else info.st_uid
        if info.st_uid != uid or info.st_mode & 0o077 or info.st_size != KEY_BYTES:
            return None
        key = f.read(KEY_BYTES + 1)
    return key if len(key) == KEY_BYTES else None


def directory_key(directory: PinnedDirectory) -> bytes | None:
    """The secret key of a cache directory, made where there is none or the one there is not
    a key (see the module doc); None when none can be read or made (a read-only directory
    without one). Processes making one at once get the same: a new key is linked into place,
    which fails where another process's is already there (a rename would replace it, and the
    entries stored with it would no longer verify); only a file that is no key is replaced."""
    key = _read_key(directory)
    if key is not None:
        return key
    try:
        fd, tmp = temporary(directory, KEY_NAME)
    except OutputError:  # the directory cannot be written
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(secrets.token_bytes(KEY_BYTES))
        try:
            os.link(tmp, KEY_NAME, src_dir_fd=directory.fd, dst_dir_fd=directory.fd,
                    follow_symlinks=False)
        except FileExistsError:  # another process's key, or a file that is none
            if _read_key(directory) is None:
                with contextlib.suppress(OSError):  # a FIFO, socket or link: replaced too
                    if not stat.S_ISREG(directory.stat(KEY_NAME, follow_symlinks=False).st_mode):
                        directory.unlink(KEY_NAME)
                directory.replace(tmp, KEY_NAME)
    except (OSError, OnnxfoldError):  # a directory in its place, a full disk
        return None
    finally:
        with contextlib.suppress(OSError):
            directory.unlink(tmp)
    return _read_key(directory)
