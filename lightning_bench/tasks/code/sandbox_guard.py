"""Child side of the code-execution sandbox. sandbox.py runs it as
`python -I -S -B sandbox_guard.py INPUT REPORT_FD` in a fresh process; the evaluator never imports it.
Standard library only: `-I -S` gives it no site-packages.

Order matters: everything that needs privileges (namespaces and mounts, raising rlimits, reading the
input file, opening the standard library) happens before the uid drop, and the Python-level guard goes on
last, right before the untrusted program runs. One JSON line goes to the report fd; the evaluator
believes only a report carrying the nonce from the input file, so a program that exits early cannot
pose as passed.

The Python-level guard follows the reference harness's reliability guard (destructive os/shutil/
subprocess functions and exit/quit/help disabled, faulthandler off) and adds: no file writes outside
the work dir, no sockets. It is a seat belt, not a wall — Python code can dig out the originals; the
walls are the rlimits, the unprivileged uid, the namespaces (no network, read-only mounts) and the
process group kill.
"""

import json
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x20000, 0x10000000, 0x40000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
SYS_MOUNT_SETATTR, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 0x1  # 442 on every arch
SIGKILL = 9

# the reference harness's list, plus what reaches the same ends another way (posix_spawn, setsid
# to leave the process group that the timeout kills, pidfd signalling of a sibling sample)
OS_DISABLED = (
    "kill", "killpg", "system", "popen", "putenv", "unsetenv", "remove", "removedirs", "rmdir", "unlink",
    "rename", "renames", "replace", "truncate", "chdir", "fchdir", "getcwd", "chroot", "chmod", "fchmod",
    "lchmod", "chown", "fchown", "lchown", "lchflags", "chflags", "link", "symlink", "mkfifo", "mknod",
    "fork", "forkpty", "execv", "execve", "posix_spawn", "posix_spawnp", "setuid", "seteuid", "setreuid",
    "setresuid", "setgid", "setegid", "setregid", "setresgid", "setgroups", "setsid", "setpgid",
    "setpgrp", "pidfd_open",
)
# `import x` of a None entry raises ImportError: the reference's list plus the raw ways around the guard
BLOCKED_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter", "ctypes", "_ctypes", "pty")

# captured: the program may replace the module attributes before the report is written
_write, _exit, _dumps = os.write, os._exit, json.dumps


def main(input_path: str, report_fd: int) -> None:
    with open(input_path) as f:
        job = json.load(f)
    job["report_fd"] = report_fd
    os.unlink(input_path)  # holds the nonce: gone before the program runs
    applied = {}
    try:
        confine(job, applied)
    except BaseException as exc:  # the sandbox could not be set up: no untrusted code has run
        report(job, "error", f"sandbox setup failed: {describe(exc)}", applied)
        _exit(2)
    status, detail = run(job["program"])
    report(job, status, detail, applied)
    _exit(0 if status == "passed" else 1)  # skips atexit handlers the program may have registered


def confine(job: dict, applied: dict) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    root = os.geteuid() == 0
    applied["net_namespace"] = applied["read_only_fs"] = False
    if root:
        isolate(libc, CLONE_NEWNET | CLONE_NEWNS, job["workdir"], applied)
    set_limits(job, applied)
    drop = root and job["uid"] is not None
    if drop:
        reopen_stdlib()
        try:
            os.setgroups([])
            os.setresgid(job["gid"], job["gid"], job["gid"])
            os.setresuid(job["uid"], job["uid"], job["uid"])
        except OSError as exc:  # root of a user namespace without the uid mapped: the rest still holds
            applied["uid_drop_failed"] = describe(exc)
    applied["uid"] = os.getuid()
    applied["uid_dropped"] = drop and os.geteuid() != 0
    if not applied["net_namespace"]:
        # unprivileged: a user namespace makes the others possible (where the kernel allows them)
        isolate(libc, CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWNS, job["workdir"], applied)
    os.chdir(job["workdir"])  # after the mounts: the path now leads to the writable bind mount
    # root is exempt from RLIMIT_NPROC; any other uid is held to it
    applied["nproc_enforced"] = os.geteuid() != 0

    def prctl(option, value):  # variadic in C: pass full-width arguments
        return libc.prctl(option, *(ctypes.c_ulong(v) for v in (value, 0, 0, 0))) == 0

    prctl(PR_SET_NO_NEW_PRIVS, 1)
    prctl(PR_SET_DUMPABLE, 0)
    # after the uid change, which clears it: the sample dies with the evaluator instead of lingering
    applied["parent_death_signal"] = prctl(PR_SET_PDEATHSIG, SIGKILL)
    if os.getppid() != job["parent_pid"]:
        raise RuntimeError("the evaluator exited before the sample started")
    install_guard(job["workdir"])
    applied["guard"] = True


def set_limits(job: dict, applied: dict) -> None:
    """Hard limits too, so the program cannot raise them back; set while still privileged."""
    import resource

    mib = 1 << 20
    limits = {"as": (resource.RLIMIT_AS, job["memory_mb"] * mib),
              "cpu": (resource.RLIMIT_CPU, job["cpu_seconds"]),
              "fsize": (resource.RLIMIT_FSIZE, job["fsize_mb"] * mib),
              # counts every process and thread of the uid: 1 means no fork and no thread at all
              "nproc": (resource.RLIMIT_NPROC, 1),
              "nofile": (resource.RLIMIT_NOFILE, 128),
              "core": (resource.RLIMIT_CORE, 0)}
    for name, (which, value) in limits.items():
        # CPU: SIGXCPU at the soft limit, SIGKILL a second later if it is caught
        resource.setrlimit(which, (value, value + 1 if name == "cpu" else value))
    applied["rlimits"] = {name: value for name, (_, value) in limits.items()}


def isolate(libc, flags: int, workdir: str, applied: dict) -> None:
    """Own network and mount namespaces. The network one has no interfaces, not even loopback up. In the
    mount one every mount turns read-only except a bind mount of the work dir: an unprivileged uid can
    still create files in world-writable dirs (/tmp, /dev/shm), and without root, the sample's uid is
    the user's own."""
    import ctypes

    if libc.unshare(flags) != 0:
        return
    applied["net_namespace"] = True

    class MountAttr(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]

    def mount(source, target, mount_flags):
        return libc.mount(source, target, None, ctypes.c_ulong(mount_flags), None) == 0

    def mount_setattr(path, at_flags, attr):
        return libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_long(AT_FDCWD), path,
                            ctypes.c_ulong(at_flags), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))) == 0

    path = workdir.encode()
    applied["read_only_fs"] = (
        mount(b"none", b"/", MS_REC | MS_PRIVATE)  # nothing done here may reach the evaluator's mounts
        and mount(path, path, MS_BIND)
        and mount_setattr(b"/", AT_RECURSIVE, MountAttr(attr_set=MOUNT_ATTR_RDONLY))
        and mount_setattr(path, 0, MountAttr(attr_clr=MOUNT_ATTR_RDONLY)))


def reopen_stdlib() -> None:
    """The interpreter may live where the unprivileged uid cannot look (/root/.pyenv is, under a 0700
    /root). A directory fd opened now keeps working after the drop: a process may always follow its own
    /proc/self/fd links, whatever lies above the directory. Imports then go through those links."""
    roots = {}
    for entry in sys.path:
        if os.path.isdir(entry):
            fd = os.open(entry, os.O_PATH | os.O_DIRECTORY)
            roots[entry] = f"/proc/self/fd/{fd}"

    def mapped(path):
        for root in sorted(roots, key=len, reverse=True):
            if path == root or path.startswith(root + os.sep):
                return roots[root] + path[len(root):]
        return path

    sys.path[:] = [mapped(p) for p in sys.path]
    for module in list(sys.modules.values()):  # packages already loaded import submodules by __path__
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            search[:] = [mapped(p) for p in search]
    sys.path_importer_cache.clear()


def install_guard(workdir: str) -> None:
    import builtins
    import faulthandler
    import io
    import posix
    import shutil
    import signal
    import socket
    import subprocess
    import _io
    import _posixsubprocess
    import _socket

    faulthandler.disable()
    realpath, isabs, join = os.path.realpath, os.path.isabs, os.path.join

    def refuse(what):
        def disabled(*args, **kwargs):
            raise PermissionError(f"{what} is disabled in the sandbox")
        return disabled

    def inside(path) -> bool:
        if isinstance(path, int):  # a descriptor the process already holds
            return True
        path = os.fsdecode(path)
        path = realpath(path if isabs(path) else join(workdir, path))
        return path == workdir or path.startswith(workdir + os.sep)

    def writes_inside(opener, what, writes):
        def guarded(path, *args, **kwargs):
            # a dir_fd makes the path relative to a directory the guard cannot see: no writes then
            if writes(*args, **kwargs) and (kwargs.get("dir_fd") is not None or not inside(path)):
                raise PermissionError(f"{what}: writing outside the work dir is disabled in the sandbox")
            return opener(path, *args, **kwargs)
        return guarded

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    guarded_open = writes_inside(builtins.open, "open", lambda mode="r", *a, **k: bool(set(mode) & set("wax+")))
    guarded_os_open = writes_inside(os.open, "os.open", lambda flags=0, *a, **k: bool(flags & write_flags))
    guarded_mkdir = writes_inside(os.mkdir, "os.mkdir", lambda *a, **k: True)
    builtins.open = io.open = _io.open = guarded_open
    for module in (os, posix):
        module.open, module.mkdir = guarded_os_open, guarded_mkdir
        for name in OS_DISABLED:
            if hasattr(module, name):
                setattr(module, name, refuse(f"os.{name}"))
    for name in ("rmtree", "move", "chown"):
        setattr(shutil, name, refuse(f"shutil.{name}"))
    subprocess.Popen = refuse("subprocess.Popen")
    _posixsubprocess.fork_exec = refuse("_posixsubprocess.fork_exec")
    signal.pidfd_send_signal = refuse("signal.pidfd_send_signal")

    class NoSocket(socket.socket):
        # a subclass, not a function: stdlib modules subclass socket.socket at import time (ssl)
        def __init__(self, *args, **kwargs):
            raise PermissionError("network access is disabled in the sandbox")

    socket.socket = socket.SocketType = _socket.socket = _socket.SocketType = NoSocket
    for name in ("socketpair", "fromfd", "create_connection", "create_server"):
        setattr(socket, name, refuse(f"socket.{name}"))
    _socket.socketpair = refuse("socket.socketpair")
    for name in BLOCKED_MODULES:
        sys.modules[name] = None
    for name in ("exit", "quit", "help"):
        setattr(builtins, name, refuse(name))
    # stdout is /dev/null already; fd 2 is kept for the interpreter's own fatal errors, the program's
    # prints to stderr go to /dev/null too. input() sees end of file.
    sys.stderr = sys.stdout
    sys.stdin = io.StringIO()


def run(program: str) -> tuple:
    import builtins

    try:
        code = compile(program, "<sample>", "exec")
        # not "__main__": like the reference harness, a sample's `if __name__ == "__main__":` stays off
        exec(code, {"__name__": "__sample__", "__builtins__": builtins})
    except BaseException as exc:  # SystemExit too: a sample that exits has not passed its tests
        return "failed", describe(exc)
    return "passed", ""


def describe(exc: BaseException) -> str:
    """`AssertionError (line 12)`, `NameError: name 'x' is not defined (line 3)`: one line, bounded."""
    try:
        text = type(exc).__name__
        message = " ".join(str(exc).split())
        if message:
            text += f": {message}"
        line, tb = None, exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "<sample>":
                line = tb.tb_lineno
            tb = tb.tb_next
        if line is None and isinstance(exc, SyntaxError):
            line = exc.lineno
        text = text[:300] + (f" (line {line})" if line else "")
    except BaseException:  # str() of a program's exception is the program's code
        text = "an exception that could not be described"
    return text


def report(job: dict, status: str, detail: str, applied: dict) -> None:
    line = _dumps({"nonce": job["nonce"], "status": status, "detail": detail, "protections": applied})
    try:
        _write(job["report_fd"], line.encode() + b"\n")
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
