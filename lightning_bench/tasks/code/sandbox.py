"""Runs model-written code (HumanEval samples) in a sandbox, never in the evaluating process.

Each program gets a fresh `python -I -S -B` process (sandbox_guard.py is its entry point) with:
- a throw-away work dir, removed afterwards, and a minimal environment (HOME and TMPDIR point into it);
- its own session, so the wall-clock timeout kills its whole process group, grandchildren included;
- rlimits: address space (memory_mb), CPU seconds, file size, NPROC=1 (no fork, no thread), no core;
- as root, the uid/gid nobody (65534);
- network and mount namespaces: no network, every mount read-only but the work dir (without root,
  through a user namespace where the kernel allows one; see sandbox_guard.py);
- the reference harness's reliability guard, plus no writes outside the work dir and no sockets.
A sample that hangs, forks, allocates without bound or deletes files costs only its own result.
`protections()` says which of these this machine allowed, for the record.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pwd
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from lightning_bench.errors import ConfigError

GUARD = Path(__file__).with_name("sandbox_guard.py")
STATUSES = ("passed", "failed", "timed_out", "error")
MIN_MEMORY_MB = 128  # the interpreter and the guard take ~16 MiB of address space; leave room for the sample
FSIZE_MB = 16  # a sample may write scratch files in its work dir, not fill the disk
PROBLEM_KEYS = ("prompt", "test", "entry_point")


@dataclass(frozen=True)
class ExecutionResult:
    status: str  # one of STATUSES: "error" means the sandbox failed, not the sample
    detail: str  # one line: the exception, or the limit that was hit
    seconds: float
    protections: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def build_program(problem: dict, completion: str) -> str:
    """A HumanEval sample as the benchmark defines it: the prompt, the completion, the problem's test
    code, then a call of its `check` on the entry point."""
    if not isinstance(problem, dict) or any(not isinstance(problem.get(k), str) for k in PROBLEM_KEYS):
        raise ConfigError(f"a code problem needs string fields {', '.join(PROBLEM_KEYS)}; got "
                          f"{sorted(problem) if isinstance(problem, dict) else type(problem).__name__}")
    if not isinstance(completion, str):
        raise ConfigError(f"a completion must be a string, got {type(completion).__name__}")
    return f"{problem['prompt']}{completion}\n{problem['test']}\ncheck({problem['entry_point']})"


def run_program(program: str, *, timeout: float = 10.0, memory_mb: int = 1024,
                cpu_seconds: Optional[int] = None) -> ExecutionResult:
    """Runs `program` in a fresh sandboxed process; "passed" when it ran to its end without an exception.
    cpu_seconds defaults to the timeout rounded up plus one: the CPU limit is the backstop that still
    holds if the evaluator itself is stopped while waiting."""
    _check_limits(timeout, memory_mb, cpu_seconds)
    if not isinstance(program, str):
        raise ConfigError(f"a program must be a string, got {type(program).__name__}")
    cpu_seconds = cpu_seconds or math.ceil(timeout) + 1
    uid, gid = _unprivileged_ids()
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="lb-sandbox-", dir=_base_dir(uid)))
    try:
        uid, gid = _hand_over(workdir, uid, gid)
        nonce = secrets.token_hex(16)
        input_path = os.path.join(workdir, ".sandbox_input.json")
        # the guard reads and deletes this before the program runs: it holds the nonce
        with open(os.open(input_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            json.dump(dict(program=program, nonce=nonce, workdir=workdir, uid=uid, gid=gid, memory_mb=memory_mb,
                           cpu_seconds=cpu_seconds, fsize_mb=FSIZE_MB, parent_pid=os.getpid()), f)
        with tempfile.TemporaryFile() as stderr:
            start = time.monotonic()
            report_r, report_w = os.pipe()
            try:
                returncode, timed_out = _supervise(input_path, report_w, stderr, timeout)
                report = _read_report(report_r, nonce)
            except OSError as exc:  # from Popen: no sandbox, so no sample ran
                return ExecutionResult("error", f"could not start the sandbox: {exc}", time.monotonic() - start)
            finally:
                os.close(report_r)
            seconds = time.monotonic() - start
            last_line = _last_line(stderr)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # after _supervise: nothing of the sample runs any more
    return _result(report, timed_out, returncode, last_line, seconds, timeout, cpu_seconds)


def check_completions(items: list[tuple[dict, str]], *, workers: int = 2, timeout: float = 10.0,
                      memory_mb: int = 1024) -> list[ExecutionResult]:
    """Runs build_program(problem, completion) for each (problem, completion) pair, at most `workers`
    sandboxes at a time (each is one process); results in input order."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be a positive integer, got {workers!r}")
    _check_limits(timeout, memory_mb, None)
    if not isinstance(items, (list, tuple)) or any(not isinstance(i, (list, tuple)) or len(i) != 2 for i in items):
        raise ConfigError("items must be a list of (problem, completion) pairs")
    programs = [build_program(problem, completion) for problem, completion in items]
    if not programs:
        return []
    # threads only wait on their child processes; the work happens in the sandboxes
    with ThreadPoolExecutor(max_workers=min(workers, len(programs)), thread_name_prefix="sandbox") as pool:
        return list(pool.map(lambda p: run_program(p, timeout=timeout, memory_mb=memory_mb), programs))


@functools.lru_cache(maxsize=1)
def protections() -> dict:
    """What the sandbox does on this machine, as applied to a trivial probe program: uid_dropped, uid,
    net_namespace, read_only_fs, nproc_enforced, parent_death_signal, guard, rlimits (the defaults:
    as_mb, cpu_s, fsize_mb, nproc, nofile, core), plus what every run gets regardless."""
    probe = run_program("pass", timeout=30.0)
    if probe.status != "passed":
        raise RuntimeError(f"the sandbox does not work here: {probe.status}: {probe.detail}")
    applied = dict(probe.protections)
    rlimits = dict(applied.pop("rlimits", {}))
    for name in ("as", "fsize"):
        rlimits[f"{name}_mb"] = rlimits.pop(name) >> 20
    rlimits["cpu_s"] = rlimits.pop("cpu")
    return {**applied, "rlimits": rlimits, "fresh_process": True, "process_group_kill": True,
            "temporary_work_dir": True, "euid": os.geteuid()}


def _check_limits(timeout, memory_mb, cpu_seconds) -> None:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < MIN_MEMORY_MB:
        raise ConfigError(f"memory_mb must be an integer >= {MIN_MEMORY_MB}, got {memory_mb!r}")
    if cpu_seconds is not None and (isinstance(cpu_seconds, bool) or not isinstance(cpu_seconds, int)
                                    or cpu_seconds < 1):
        raise ConfigError(f"cpu_seconds must be a positive integer or None, got {cpu_seconds!r}")


def _unprivileged_ids() -> tuple:
    """(uid, gid) the sample runs as: nobody when we are root (root ignores RLIMIT_NPROC and may write
    anywhere), else (None, None): an ordinary user cannot switch, the sample keeps our uid."""
    if os.geteuid() != 0:
        return None, None
    try:
        nobody = pwd.getpwnam("nobody")
        return nobody.pw_uid, nobody.pw_gid
    except KeyError:
        return 65534, 65534


def _base_dir(uid) -> str:
    """Where work dirs go: the usual temp dir, unless the sample's uid could not reach it (TMPDIR under a
    0700 home) — then /tmp, which every uid can traverse."""
    base = tempfile.gettempdir()
    if uid is None:
        return base
    path = Path(base).resolve()
    if all(p.stat().st_mode & 0o001 for p in (path, *path.parents)):
        return str(path)
    return "/tmp"


def _environment(workdir: str) -> dict:
    return {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
            "OMP_NUM_THREADS": "1"}


def _hand_over(workdir: str, uid, gid) -> tuple:
    """Gives the work dir to the sample's uid, so that it is the one place the sample can write."""
    if uid is None:
        return None, None
    try:
        os.chown(workdir, uid, gid)
        return uid, gid
    except OSError:  # root of a user namespace in which nobody is not mapped: no drop then
        return None, None


def _supervise(input_path: str, report_w: int, stderr, timeout: float) -> tuple:
    """Starts the guard and waits up to `timeout` s: (returncode, timed_out). Whatever happens here (an
    interrupt included), the sample's whole process group is dead when it returns."""
    workdir = os.path.dirname(input_path)
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", str(GUARD), input_path, str(report_w)],
                                cwd=workdir, env=_environment(workdir), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=stderr, pass_fds=(report_w,),
                                start_new_session=True)
    finally:
        os.close(report_w)  # the child holds its own copy
    try:
        timed_out = not _wait_for_exit(proc, timeout)
    finally:
        _kill_group(proc.pid)
        proc.wait()
    return proc.returncode, timed_out


def _wait_for_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Waits up to `timeout` s without reaping: while the exited child is a zombie its pid still names
    the process group, so the group kill that follows cannot hit a recycled pid."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # kernels before 5.3: wait reaps, the kill may then find nothing
        try:
            proc.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        poller = select.poll()  # not select(): a busy evaluator can hold fds beyond FD_SETSIZE
        poller.register(pidfd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(pidfd)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)  # also after a normal exit: strays must not outlive the sample
    except (ProcessLookupError, PermissionError):
        pass


def _read_report(fd: int, nonce: str) -> Optional[dict]:
    """The guard's report line; anything else in the pipe (the program can write to the fd) is ignored.
    Non-blocking and bounded: a stray holding the pipe open or flooding it cannot stall the evaluator."""
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 1 << 16)
    except OSError:  # BlockingIOError: nothing written, and a stray still holds the pipe
        return None
    for line in reversed(data.splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and report.get("nonce") == nonce and report.get("status") in STATUSES:
            return report
    return None


def _last_line(file) -> str:
    """The last line the interpreter wrote to fd 2 (a fatal error, say); the file is bounded by RLIMIT_FSIZE."""
    file.seek(max(0, os.fstat(file.fileno()).st_size - 2000))
    lines = [line.strip() for line in file.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _result(report, timed_out, returncode, last_line, seconds, timeout, cpu_seconds) -> ExecutionResult:
    if report is not None:
        return ExecutionResult(report["status"], str(report.get("detail", "")), seconds,
                               report.get("protections") or {})
    if timed_out:
        return ExecutionResult("timed_out", f"no result within the {timeout:g} s wall-clock limit", seconds)
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() else str(-returncode)
        if name == "SIGXCPU":
            return ExecutionResult("timed_out", f"hit the {cpu_seconds} s CPU limit (SIGXCPU)", seconds)
        return ExecutionResult("failed", f"killed by {name}", seconds)
    detail = f"exited with status {returncode} before its tests finished"
    return ExecutionResult("failed", f"{detail}: {last_line}" if last_line else detail, seconds)
