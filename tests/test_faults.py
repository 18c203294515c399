"""Faults and hostile input, on real files in temporary folders.

Every test asserts the exit code, the per-file messages, and the bytes and metadata (owner, group,
mode, inode, link count) of every file in the tree. Permission faults need a user that is not
root: as root they run the command as `nobody` through `setpriv`; as another user, as that user.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import pwd
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ampfix.io import files
from ampfix.cli.app import app
from ampfix.core.options import Options

DEPRECATED = "import torch\nwith torch.cuda.amp.autocast(True):\n    pass\n"
MIGRATED = 'import torch\nwith torch.amp.autocast("cuda", enabled=True):\n    pass\n'
AUTOCAST_MESSAGE = ('`torch.cuda.amp.autocast(...)` -> `torch.amp.autocast(...)` with device "cuda", '
                    "positional arguments named enabled")
AUTOCAST = "AMP001 {mark} " + AUTOCAST_MESSAGE
SCALER = 'AMP002 {mark} `torch.cuda.amp.GradScaler(...)` -> `torch.amp.GradScaler(...)` with device "cuda"'
# No metadata above these files: the newest torch, said; what an autocast fix makes the code need (1.10), a
# GradScaler fix (2.3).
NEWEST = "target torch: the newest (none declared)"
NEEDS_AUTOCAST = NEWEST + "; the output needs torch >= 1.10 (AMP001)"
NEEDS_SCALER = NEWEST + "; the output needs torch >= 2.3 (AMP002)"
IS_ROOT = os.geteuid() == 0


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything a run could change, for every entry below `root` (links are not followed)."""
    state = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode):
            content: object = path.read_bytes()
        elif stat.S_ISLNK(info.st_mode):
            content = os.readlink(path)
        else:
            content = stat.S_IFMT(info.st_mode)
        state[str(path.relative_to(root))] = (content, info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode),
                                              info.st_ino, info.st_nlink)
    return state


def with_content(state: dict[str, tuple], name: str, content: bytes) -> dict[str, tuple]:
    """`state` where `name` holds `content` in a new inode (an atomic replace), all else kept."""
    _, uid, gid, mode, _, nlink = state[name]
    return {**state, name: (content, uid, gid, mode, None, nlink)}


def same_except_inodes(after: dict[str, tuple], expected: dict[str, tuple]) -> bool:
    """`after` equals `expected`, where an expected inode of None means any inode (a new file)."""
    assert after.keys() == expected.keys(), (after.keys(), expected.keys())
    for name, want in expected.items():
        got = after[name]
        if want[4] is None:
            assert got[:4] + got[5:] == want[:4] + want[5:], (name, got, want)
        else:
            assert got == want, (name, got, want)
    return True


# Running as a user who is not root -------------------------------------------------------------

def _unprivileged_prefix() -> list[str] | None:
    if not IS_ROOT:
        return []
    if shutil.which("setpriv") is None:
        return None
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return None
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


UNPRIVILEGED = _unprivileged_prefix()
needs_unprivileged = pytest.mark.skipif(
    UNPRIVILEGED is None, reason="running as root without setpriv or a `nobody` user: no way to drop privileges")


# A stand-in set in this process reaches the pool's workers only when they are forked from it.
needs_fork = pytest.mark.skipif(multiprocessing.get_start_method() != "fork",
                                reason="pool workers are not forked here, so a monkeypatch does not reach them")


def unprivileged_uid_gid() -> tuple[int, int]:
    if not IS_ROOT:
        return os.geteuid(), os.getegid()
    user = pwd.getpwnam("nobody")
    return user.pw_uid, user.pw_gid


@pytest.fixture
def open_tmp():
    """A temporary folder the unprivileged user can reach (pytest's own is root's, mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="ampfix-faults-"))
    folder.chmod(0o755)
    yield folder
    for path in [folder, *folder.rglob("*")]:  # give every folder back its permissions, then remove
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(folder)


def own(root: Path, uid: int, gid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, gid)


def ampfix_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "ampfix", *args]


def run_unprivileged(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([*UNPRIVILEGED, *ampfix_cmd(*args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


# A failed write is never reported as fixed -------------------------------------------------------

def _two_files(folder: Path) -> tuple[Path, Path]:
    folder.mkdir()
    stuck, free = folder / "a.py", folder / "b.py"
    stuck.write_text(DEPRECATED)
    free.write_text(DEPRECATED)
    return stuck, free


def _expected_lines(stuck: Path, free: Path, why: str) -> list[str]:
    return [
        f"{stuck}:2:6: {AUTOCAST.format(mark='left:')}",
        f"{stuck}:1:1: AMP903 left: cannot write: {why}; the file is unchanged",
        f"{free}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 1 finding left; 1 file could not be processed.",
    ]


@pytest.mark.skipif(not IS_ROOT, reason="chattr +i needs root (CAP_LINUX_IMMUTABLE)")
def test_an_immutable_file_is_reported_not_fixed_and_left_whole(tmp_path: Path):
    stuck, free = _two_files(tmp_path / "pkg")
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported on this file system")
    try:
        before = snapshot(tmp_path)
        result = invoke("rewrite", str(tmp_path))
        assert result.exit_code == 2
        assert result.stdout.splitlines() == _expected_lines(stuck, free, "Operation not permitted")
        assert same_except_inodes(snapshot(tmp_path), with_content(before, "pkg/b.py", MIGRATED.encode()))

        as_json = invoke("rewrite", "--output-format", "json", str(tmp_path))
        assert as_json.exit_code == 2
        rows = json.loads(as_json.stdout)
        assert [(r["path"], r["code"], r["fixed"]) for r in rows] == [
            (str(stuck), "AMP001", False), (str(stuck), "AMP903", False)]
        assert rows[1]["message"] == "cannot write: Operation not permitted; the file is unchanged"
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], check=True)


@needs_unprivileged
def test_a_file_in_a_read_only_folder_is_reported_not_fixed(open_tmp: Path):
    stuck, free = _two_files(open_tmp / "pkg")
    (open_tmp / "pkg" / "ro").mkdir()
    stuck = stuck.rename(open_tmp / "pkg" / "ro" / "a.py")
    own(open_tmp / "pkg", *unprivileged_uid_gid())
    (open_tmp / "pkg" / "ro").chmod(0o555)
    before = snapshot(open_tmp)
    result = run_unprivileged("rewrite", "pkg", cwd=open_tmp)  # paths as given: relative
    assert (result.returncode, result.stderr) == (2, "")
    assert result.stdout.splitlines() == [  # a folder's files come before its subfolders
        f"pkg/b.py:2:6: {AUTOCAST.format(mark='fixed:')}",
        f"pkg/ro/a.py:2:6: {AUTOCAST.format(mark='left:')}",
        "pkg/ro/a.py:1:1: AMP903 left: cannot write: Permission denied; the file is unchanged",
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 1 finding left; 1 file could not be processed.",
    ]
    assert same_except_inodes(snapshot(open_tmp), with_content(before, "pkg/b.py", MIGRATED.encode()))


def test_a_file_size_limit_is_reported_not_fixed(tmp_path: Path):
    stuck = tmp_path / "a.py"
    stuck.write_text(DEPRECATED)
    before = snapshot(tmp_path)

    def small_files() -> None:  # Python ignores SIGXFSZ: the write fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(DEPRECATED), resource.RLIM_INFINITY))

    result = subprocess.run(ampfix_cmd("rewrite", "--output-format", "json", str(tmp_path)), preexec_fn=small_files,
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (2, "")
    rows = json.loads(result.stdout)
    assert [(r["path"], r["code"], r["fixed"], r["message"]) for r in rows] == [
        (str(stuck), "AMP001", False, AUTOCAST_MESSAGE),
        (str(stuck), "AMP903", False, "cannot write: File too large; the file is unchanged"),
    ]
    assert snapshot(tmp_path) == before  # no temporary file left behind either


# Unexpected errors in one file ------------------------------------------------------------------

def _elif_chain(branches: int) -> str:
    return ("import torch\nx = torch.cuda.amp.GradScaler()\nif x == 0:\n    pass\n"
            + "".join(f"elif x == {i}:\n    pass\n" for i in range(1, branches)))


def test_deep_elif_chains_in_a_folder_with_other_deprecated_files(tmp_path: Path):
    # 350 branches: valid Python, rewritten like any file. 3,000: CPython's own parser gives up
    # (RecursionError during ast construction): that file's finding, and the run goes on.
    valid, too_deep = tmp_path / "b_valid_deep.py", tmp_path / "c_too_deep.py"
    valid.write_text(_elif_chain(350))
    too_deep.write_text(_elif_chain(3000))
    with pytest.raises(RecursionError) as raised:
        ast.parse(too_deep.read_text())
    (tmp_path / "a.py").write_text(DEPRECATED)
    (tmp_path / "z.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(tmp_path))
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        f"{tmp_path / 'a.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        f"{valid}:2:5: {SCALER.format(mark='fixed:')}",
        f"{too_deep}:1:1: AMP901 left: cannot parse: {raised.value}",
        f"{tmp_path / 'z.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_SCALER,
        "rewrote 3 files (3 fixes); 0 findings left; 1 file could not be processed.",
    ]
    valid_migrated = _elif_chain(350).replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')
    expected = with_content(before, "a.py", MIGRATED.encode())
    expected = with_content(expected, "b_valid_deep.py", valid_migrated.encode())
    expected = with_content(expected, "z.py", MIGRATED.encode())
    assert same_except_inodes(snapshot(tmp_path), expected)


@needs_fork
def test_an_error_inside_a_pool_worker_is_that_files_finding(tmp_path: Path, monkeypatch):
    for i in range(files.MIN_FILES_FOR_POOL + 4):
        (tmp_path / f"m{i:02d}.py").write_text(DEPRECATED)
    real_process_file = files.process_file
    failing = tmp_path / "m07.py"

    def process_file(path, *args, **kwargs):  # inherited by the forked workers
        if path == failing:
            raise RecursionError("maximum recursion depth exceeded")
        return real_process_file(path, *args, **kwargs)

    monkeypatch.setattr(files, "process_file", process_file)
    before = snapshot(tmp_path)
    results = list(files.process_paths([tmp_path], Options(), "diff", jobs=2))
    assert snapshot(tmp_path) == before
    assert [r.path for r in results] == [str(p) for p in sorted(tmp_path.glob("*.py"))]
    bad = results[7]
    assert bad.error == "internal error, file left unchanged: RecursionError: maximum recursion depth exceeded"
    assert [(f.code, f.message) for f in bad.findings] == [("AMP900", bad.error)]
    assert all(r.changed and r.error is None for i, r in enumerate(results) if i != 7)


# Folders that cannot be read ---------------------------------------------------------------------

@needs_unprivileged
def test_folders_that_cannot_be_read_are_errors_and_the_rest_is_processed(open_tmp: Path):
    tree = open_tmp / "tree"
    for folder in ("a", "locked", "listless"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "m.py").write_text(DEPRECATED)
    (tree / "z.py").write_text(DEPRECATED)
    own(tree, *unprivileged_uid_gid())
    (tree / "locked").chmod(0o000)  # cannot be searched: not even its entries' types are known
    (tree / "listless").chmod(0o311)  # can be entered, cannot be listed
    before = snapshot(tree)
    result = run_unprivileged("rewrite", "tree", cwd=open_tmp)
    assert (result.returncode, result.stderr) == (2, "")
    assert result.stdout.splitlines() == [
        f"tree/z.py:2:6: {AUTOCAST.format(mark='fixed:')}",
        f"tree/a/m.py:2:6: {AUTOCAST.format(mark='fixed:')}",
        "tree/listless:1:1: AMP902 left: cannot read folder: Permission denied",
        "tree/locked:1:1: AMP902 left: cannot read folder: Permission denied",
        NEEDS_AUTOCAST,
        "rewrote 2 files (2 fixes); 0 findings left; 2 files could not be processed.",
    ]
    expected = with_content(with_content(before, "a/m.py", MIGRATED.encode()), "z.py", MIGRATED.encode())
    assert same_except_inodes(snapshot(tree), expected)

    alone = run_unprivileged("check", "tree/listless", cwd=open_tmp)
    assert (alone.returncode, alone.stdout.splitlines()) == (2, [
        "tree/listless:1:1: AMP902 cannot read folder: Permission denied",
        "0 findings (0 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes); 1 file could not be processed.",
    ])


# Files that are not regular files ----------------------------------------------------------------

def test_a_fifo_named_py_never_blocks_given_or_found(tmp_path: Path):
    fifo = tmp_path / "x.py"
    os.mkfifo(fifo)
    (tmp_path / "a.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    given = subprocess.run(ampfix_cmd("check", str(fifo)), capture_output=True, text=True, timeout=30)
    assert (given.returncode, given.stdout.splitlines()) == (2, [
        f"{fifo}:1:1: AMP902 not a regular file (a FIFO): skipped",
        "0 findings (0 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes); 1 file could not be processed.",
    ])
    found = subprocess.run(ampfix_cmd("rewrite", str(tmp_path)), capture_output=True, text=True, timeout=30)
    assert (found.returncode, found.stdout.splitlines()) == (2, [
        f"{tmp_path / 'a.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        f"{fifo}:1:1: AMP902 left: not a regular file (a FIFO): skipped",
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 0 findings left; 1 file could not be processed.",
    ])
    assert same_except_inodes(snapshot(tmp_path), with_content(before, "a.py", MIGRATED.encode()))


def test_a_device_named_py_is_never_opened(tmp_path: Path, monkeypatch):
    device = tmp_path / "null.py"
    try:
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("cannot create a device node here (needs CAP_MKNOD)")
    before = snapshot(tmp_path)
    opened, real_open = [], os.open

    def recording_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    result = invoke("rewrite", str(device))
    monkeypatch.undo()
    assert str(device) not in opened
    assert (result.exit_code, result.stdout.splitlines()) == (2, [
        f"{device}:1:1: AMP902 left: not a regular file (a character device): skipped",
        "rewrote 0 files (0 fixes); 0 findings left; 1 file could not be processed.",
    ])
    assert snapshot(tmp_path) == before


# The file's identity -----------------------------------------------------------------------------

@pytest.mark.skipif(not IS_ROOT, reason="only root can give a file to another user")
def test_a_root_rewrite_keeps_another_users_owner_group_and_mode(tmp_path: Path):
    path = tmp_path / "theirs.py"
    path.write_text(DEPRECATED)
    os.chown(path, 65534, 65534)
    path.chmod(0o640)
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(path))
    assert (result.exit_code, result.stdout.splitlines()) == (1, [
        f"{path}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 0 findings left.",
    ])
    after = snapshot(tmp_path)
    assert after["theirs.py"][1:4] == (65534, 65534, 0o640)
    assert same_except_inodes(after, with_content(before, "theirs.py", MIGRATED.encode()))


@needs_unprivileged
@pytest.mark.skipif(not IS_ROOT, reason="giving a file a group its owner is not in needs root")
def test_a_file_whose_group_cannot_be_kept_is_left_and_reported(open_tmp: Path):
    uid, gid = unprivileged_uid_gid()
    path = open_tmp / "pkg" / "a.py"
    path.parent.mkdir()
    path.write_text(DEPRECATED)
    own(open_tmp / "pkg", uid, gid)
    other_gid = 0 if gid != 0 else 1  # a group the user is not in
    os.chown(path, uid, other_gid)
    path.chmod(0o664)
    before = snapshot(open_tmp)
    result = run_unprivileged("rewrite", "pkg", cwd=open_tmp)
    assert (result.returncode, result.stdout.splitlines()) == (2, [
        f"pkg/a.py:2:6: {AUTOCAST.format(mark='left:')}",
        f"pkg/a.py:1:1: AMP903 left: cannot write: cannot keep its owner {uid}:{other_gid} (Operation not "
        "permitted); the file is unchanged",
        NEWEST,  # nothing fixed: nothing needs more
        "rewrote 0 files (0 fixes); 1 finding left; 1 file could not be processed.",
    ])
    assert snapshot(open_tmp) == before


def test_a_hard_linked_file_is_left_and_reported(tmp_path: Path):
    one = tmp_path / "one.py"
    one.write_text(DEPRECATED)
    os.link(one, tmp_path / "two.py")
    (tmp_path / "z.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(tmp_path))
    assert result.exit_code == 2
    why = "it has 2 hard links, and a rewrite would cut it off from the others"
    assert result.stdout.splitlines() == [
        f"{one}:2:6: {AUTOCAST.format(mark='left:')}",
        f"{one}:1:1: AMP903 left: cannot write: {why}; the file is unchanged",
        f"{tmp_path / 'two.py'}:2:6: {AUTOCAST.format(mark='left:')}",
        f"{tmp_path / 'two.py'}:1:1: AMP903 left: cannot write: {why}; the file is unchanged",
        f"{tmp_path / 'z.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 2 findings left; 2 files could not be processed.",
    ]
    assert same_except_inodes(snapshot(tmp_path), with_content(before, "z.py", MIGRATED.encode()))
    # A dry run still shows what the rewrite would be.
    assert invoke("rewrite", "--diff", str(one)).exit_code == 1


def test_symlinks_in_a_folder_are_not_followed_a_named_one_is(tmp_path: Path):
    outside = tmp_path / "outside" / "shared.py"
    outside.parent.mkdir()
    outside.write_text(DEPRECATED)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "inner.py").write_text(DEPRECATED)
    (tree / "to_inner.py").symlink_to("inner.py")
    (tree / "to_outside.py").symlink_to(outside)
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(tree))
    assert (result.exit_code, result.stdout.splitlines()) == (1, [
        f"{tree / 'inner.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",  # once, under its own name
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 0 findings left.",
    ])
    after = snapshot(tmp_path)
    assert same_except_inodes(after, with_content(before, "tree/inner.py", MIGRATED.encode()))
    # Named explicitly, the link is followed: the target is rewritten, the link stays a link.
    named = invoke("rewrite", str(tree / "to_outside.py"))
    assert (named.exit_code, named.stdout.splitlines()) == (1, [
        f"{tree / 'to_outside.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_AUTOCAST,
        "rewrote 1 file (1 fix); 0 findings left.",
    ])
    assert same_except_inodes(snapshot(tmp_path), with_content(after, "outside/shared.py", MIGRATED.encode()))


# Output encodings --------------------------------------------------------------------------------

def test_an_ascii_output_stream_gets_escapes_not_a_crash(tmp_path: Path):
    folder = tmp_path / "café"
    folder.mkdir()
    path = folder / "m.py"
    source = "import torch\n# naïve\nscaler = torch.cuda.amp.GradScaler()  # ü\n"
    path.write_text(source)
    before = snapshot(tmp_path)
    shown = str(path).replace("é", "\\xe9")
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(ampfix_cmd(*args), env=env, capture_output=True, text=True, encoding="ascii",
                              timeout=60)

    diff = run("rewrite", "--diff", str(path))
    assert (diff.returncode, diff.stdout, diff.stderr) == (1, (
        f"--- a/{shown}\n+++ b/{shown}\n@@ -1,3 +1,3 @@\n import torch\n # na\\xefve\n"
        "-scaler = torch.cuda.amp.GradScaler()  # \\xfc\n"
        '+scaler = torch.amp.GradScaler("cuda")  # \\xfc\n'
    ), f"{shown}:3:10: {SCALER.format(mark='would fix:')}\n{NEWEST}; the output would need torch >= 2.3 (AMP002)\n"
       "would rewrite 1 file (1 fix); 0 findings left.\n")
    text = run("check", str(path))
    assert (text.returncode, text.stdout) == (1, (
        f"{shown}:3:10: {SCALER.format(mark='[*]')}\n"
        f"{NEWEST}; the fixes need torch >= 2.3 (AMP002)\n"
        "1 finding (1 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).\n"))
    as_json = run("check", "--output-format", "json", str(path))
    assert as_json.returncode == 1 and json.loads(as_json.stdout)[0]["path"] == str(path)
    assert snapshot(tmp_path) == before


def test_a_file_name_that_is_not_utf8_is_shown_escaped_or_as_its_bytes(tmp_path: Path):
    folder = os.fsencode(tmp_path)
    with open(folder + b"/n\xff.py", "w") as handle:
        handle.write(DEPRECATED)
    before = snapshot(tmp_path)
    summary = (f"{NEWEST}; the fixes need torch >= 1.10 (AMP001)\n".encode()
               + b"1 finding (1 fixable with `ampfix rewrite`, 0 more with --unsafe-fixes).\n")
    line = AUTOCAST.format(mark="[*]").encode()
    strict = subprocess.run(ampfix_cmd("check", str(tmp_path)), capture_output=True, timeout=60,
                            env={**os.environ, "PYTHONIOENCODING": "utf-8"})
    assert (strict.returncode, strict.stdout) == (1, folder + b"/n\\udcff.py:2:6: " + line + b"\n" + summary)
    as_bytes = subprocess.run(ampfix_cmd("check", str(tmp_path)), capture_output=True, timeout=60,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8:surrogateescape"})
    assert (as_bytes.returncode, as_bytes.stdout) == (1, folder + b"/n\xff.py:2:6: " + line + b"\n" + summary)
    assert snapshot(tmp_path) == before


# Line endings ------------------------------------------------------------------------------------

def test_cr_only_line_endings_keep_the_final_cr(tmp_path: Path):
    path = tmp_path / "mac.py"
    path.write_bytes(b"import torch\rwith torch.cuda.amp.autocast(True):\r    pass\r")
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(path))
    assert (result.exit_code, result.stdout.splitlines()) == (1, [
        f"{path}:2:6: {AUTOCAST.format(mark='fixed:')}", NEEDS_AUTOCAST, "rewrote 1 file (1 fix); 0 findings left."])
    migrated = b'import torch\rwith torch.amp.autocast("cuda", enabled=True):\r    pass\r'
    after = snapshot(tmp_path)
    assert same_except_inodes(after, with_content(before, "mac.py", migrated))
    assert invoke("rewrite", str(path)).exit_code == 0
    assert snapshot(tmp_path) == after


@pytest.mark.parametrize(("source", "expected"), [
    ("import torch\rx = torch.cuda.amp.GradScaler()\r\r", 'import torch\rx = torch.amp.GradScaler("cuda")\r\r'),
    ("import torch\rx = torch.cuda.amp.GradScaler()  # c\r", 'import torch\rx = torch.amp.GradScaler("cuda")  # c\r'),
    ("import torch\rx = torch.cuda.amp.GradScaler()", 'import torch\rx = torch.amp.GradScaler("cuda")'),
    ("import torch\nx = torch.cuda.amp.GradScaler()\r", 'import torch\nx = torch.amp.GradScaler("cuda")\r'),
    ("from torch.cuda.amp import GradScaler\rx = GradScaler()\r",
     'from torch.amp import GradScaler\rx = GradScaler("cuda")\r'),
])
def test_the_engine_keeps_a_final_cr_and_adds_none(source: str, expected: str):
    from ampfix.engine import fix_source

    assert fix_source(source).new_source == expected


# Interrupted and killed runs ---------------------------------------------------------------------

# Ctrl-C as a terminal sends it (to the whole process group: the pool's workers too), at the moment
# the run starts on a given file.
CTRL_C_AT = """
import os, signal, sys
from pathlib import Path
from ampfix.cli import console
from ampfix.io import files
real_process_file = files.process_file

def process_file(path, *args, **kwargs):
    if path.name == sys.argv[2]:
        os.killpg(0, signal.SIGINT)
    return real_process_file(path, *args, **kwargs)

files.process_file = process_file
sys.exit(console.run_files([Path(sys.argv[1])], "rewrite"))
"""
INTERRUPTED = "ampfix: interrupted, stopped after the files in progress; the files not listed were not processed.\n"


def _ctrl_c_at(tree: Path, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CTRL_C_AT, str(tree), name], capture_output=True, text=True,
                          timeout=60, start_new_session=True)


def _fixed_paths(stdout: str) -> list[str]:
    return [line.split(":", 1)[0] for line in stdout.splitlines() if " fixed: " in line]


def test_ctrl_c_finishes_the_file_in_progress_lists_what_was_done_and_exits_130(tmp_path: Path):
    # Fewer candidates than the pool needs: one process.
    names = ["a0", "a1", "b", "c0", "c1"]
    for name in names:
        (tmp_path / f"{name}.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    result = _ctrl_c_at(tmp_path, "b.py")
    assert (result.returncode, result.stderr) == (130, INTERRUPTED)
    done = [str(tmp_path / f"{name}.py") for name in ("a0", "a1", "b")]
    assert result.stdout.splitlines() == [
        *(f"{path}:2:6: {AUTOCAST.format(mark='fixed:')}" for path in done),
        NEEDS_AUTOCAST,
        "rewrote 3 files (3 fixes); 0 findings left.",
    ]
    expected = before
    for name in ("a0.py", "a1.py", "b.py"):
        expected = with_content(expected, name, MIGRATED.encode())
    assert same_except_inodes(snapshot(tmp_path), expected)


def test_ctrl_c_in_a_pooled_run_lists_exactly_the_files_written(tmp_path: Path):
    count = files.MIN_FILES_FOR_POOL * 5
    for i in range(count):
        (tmp_path / f"m{i:02d}.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    result = _ctrl_c_at(tmp_path, "m05.py")  # a worker starts on m05.py: every process gets SIGINT
    assert (result.returncode, result.stderr) == (130, INTERRUPTED)
    after = snapshot(tmp_path)
    written = sorted(str(tmp_path / name) for name in after if after[name] != before[name])
    assert _fixed_paths(result.stdout) == written
    assert str(tmp_path / "m05.py") in written  # the worker finished the file it had started
    # No chunk is handed out after the interrupt: at most the window then in flight was processed.
    assert len(written) <= (files.IN_FLIGHT * 2 + 1) * files.CHUNK_SIZE < count
    assert result.stdout.splitlines()[-1] == f"rewrote {len(written)} files ({len(written)} fixes); 0 findings left."
    assert all(after[n][0] in (DEPRECATED.encode(), MIGRATED.encode()) for n in after)
    assert after.keys() == before.keys()


WORKERS_THEN_WAIT = """
import multiprocessing, sys, time
from ampfix.io import files
from ampfix.core.options import Options
if sys.argv[2] == "watcher":  # as where there is no prctl: a thread in each worker watches the parent
    files._signal_on_parent_death = lambda signum: False
results = files.process_paths([sys.argv[1]], Options(), "check", jobs=2)
next(results)
print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
time.sleep(600)
"""


def _wait_until(condition, timeout: float, why=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out {why()}"
        time.sleep(0.01)


def _process_state(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a live process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return fields[0], fields[19]


def _ended(pid: int, started: str) -> bool:
    state = _process_state(pid)
    # A zombie has ended; a pid with another start time is another process (the pid was reused).
    return state is None or state[0] in ("Z", "X") or state[1] != started


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize("how", ["death signal", "watcher"])
def test_pool_workers_end_when_their_parent_is_killed(tmp_path: Path, how: str):
    for i in range(files.MIN_FILES_FOR_POOL * 3):
        (tmp_path / f"m{i:02d}.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    parent = subprocess.Popen([sys.executable, "-c", WORKERS_THEN_WAIT, str(tmp_path), how], stdout=subprocess.PIPE,
                              text=True)
    workers = {int(pid): _process_state(int(pid)) for pid in parent.stdout.readline().split()}
    assert len(workers) == 2 and all(state is not None and state[0] not in ("Z", "X") for state in workers.values())
    started = {pid: state[1] for pid, state in workers.items()}
    parent.kill()
    parent.wait(timeout=10)
    try:  # seconds on an idle machine; the margin is for a loaded one
        _wait_until(lambda: all(_ended(pid, started[pid]) for pid in workers), timeout=15,
                    why=lambda: {pid: _process_state(pid) for pid in workers})
    finally:
        for pid in workers:
            if not _ended(pid, started[pid]):
                os.kill(pid, signal.SIGKILL)
    assert snapshot(tmp_path) == before


@needs_fork
def test_a_worker_that_dies_costs_only_the_files_in_flight(tmp_path: Path, monkeypatch):
    for i in range(files.MIN_FILES_FOR_POOL * 4):
        (tmp_path / f"m{i:02d}.py").write_text(DEPRECATED)
    before = snapshot(tmp_path)
    real_process_file = files.process_file
    culprit, test_process = tmp_path / "m05.py", os.getpid()

    def process_file(path, *args, **kwargs):  # inherited by the forked workers
        if path == culprit and os.getpid() != test_process:
            os._exit(9)  # as the kernel's OOM killer would end it
        return real_process_file(path, *args, **kwargs)

    monkeypatch.setattr(files, "process_file", process_file)
    results = list(files.process_paths([tmp_path], Options(), "rewrite", jobs=2))
    assert [r.path for r in results] == [str(p) for p in sorted(tmp_path.glob("*.py"))]
    lost = [r for r in results if r.error]
    message = ("internal error: the process working on it ended unexpectedly; the file is either as it was "
               "or completely rewritten")
    assert str(culprit) in [r.path for r in lost]
    assert all([(f.code, f.message) for f in r.findings] == [("AMP900", message)] for r in lost)
    assert len(lost) <= (files.IN_FLIGHT * 2 + 1) * files.CHUNK_SIZE  # what was in flight, no more
    assert all(r.changed for r in results if not r.error)  # the rest, in a new pool
    after = snapshot(tmp_path)
    assert after.keys() == before.keys()  # no temporary file left
    for result in results:
        name = Path(result.path).name
        want = MIGRATED.encode() if result.changed else after[name][0]
        assert after[name][0] == want and want in (DEPRECATED.encode(), MIGRATED.encode())


def test_a_failure_reading_one_file_is_that_files_finding(tmp_path: Path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.py").write_text(DEPRECATED)
    real_read_candidate = files.read_candidate

    def read_candidate(path, *args):
        if path.name == "b.py":
            raise MemoryError("too big")
        return real_read_candidate(path, *args)

    monkeypatch.setattr(files, "read_candidate", read_candidate)
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(tmp_path))
    assert (result.exit_code, result.stdout.splitlines()) == (2, [
        f"{tmp_path / 'a.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        f"{tmp_path / 'b.py'}:1:1: AMP900 left: internal error, file left unchanged: MemoryError: too big",
        f"{tmp_path / 'c.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_AUTOCAST,
        "rewrote 2 files (2 fixes); 0 findings left; 1 file could not be processed.",
    ])
    expected = with_content(with_content(before, "a.py", MIGRATED.encode()), "c.py", MIGRATED.encode())
    assert same_except_inodes(snapshot(tmp_path), expected)


def test_a_failure_outside_any_one_file_still_lists_the_files_done(tmp_path: Path, monkeypatch):
    for name in ("a", "b"):
        (tmp_path / f"{name}.py").write_text(DEPRECATED)
    real_process_paths = files.process_paths

    def process_paths(*args, **kwargs):  # the run itself fails after two files
        yield from real_process_paths(*args, **kwargs)
        raise RuntimeError("the walk broke")

    monkeypatch.setattr(files, "process_paths", process_paths)
    before = snapshot(tmp_path)
    result = invoke("rewrite", str(tmp_path))
    assert (result.exit_code, result.stdout.splitlines()) == (2, [
        f"{tmp_path / 'a.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        f"{tmp_path / 'b.py'}:2:6: {AUTOCAST.format(mark='fixed:')}",
        NEEDS_AUTOCAST,
        "rewrote 2 files (2 fixes); 0 findings left.",
    ])
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert result.stderr.endswith("RuntimeError: the walk broke\nampfix: internal error, the run stopped; "
                                  "the files not listed were not processed.\n")
    expected = with_content(with_content(before, "a.py", MIGRATED.encode()), "b.py", MIGRATED.encode())
    assert same_except_inodes(snapshot(tmp_path), expected)
