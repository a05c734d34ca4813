"""The sandbox for model-written code (HumanEval). The 164 canonical solutions pass; each hostile sample
(a hang, a fork bomb, a huge allocation, a write or delete outside its work dir, a network connection)
runs in the same check_completions call as passing samples and must fail alone, within its timeout,
leaving the evaluator and the machine as they were."""

import gzip
import json
import os
import resource
import socket
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.code.sandbox import (ExecutionResult, build_program, check_completions,
                                                       protections, run_program)

ADD = {"task_id": "test/add", "prompt": "def add(a, b):\n", "entry_point": "add",
       "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}
GOOD = "    return a + b\n"


def hostile(code: str) -> str:
    """A correct body followed by module-level code: the sample fails only if that code is stopped."""
    return f"{GOOD}\n{code}\n"


def with_good_neighbours(codes, **kwargs):
    """Runs the hostile codes between two passing samples; returns the hostile samples' results."""
    items = [(ADD, GOOD)] + [(ADD, hostile(code)) for code in codes] + [(ADD, GOOD)]
    results = check_completions(items, **kwargs)
    assert results[0].passed and results[-1].passed, (results[0], results[-1])
    return results[1:-1]


def processes() -> dict:
    """pid -> (uid, cmdline) of every live process on the machine."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = int((entry / "status").read_text().split("\nUid:")[1].split()[0])
                found[int(entry.name)] = (uid, (entry / "cmdline").read_bytes())
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
    return found


def sandbox_leftovers(before: dict) -> list:
    """Processes that a sample may have left: a guard or a `sleep 30` it started, or anything new as nobody."""
    return [(pid, uid, cmd) for pid, (uid, cmd) in processes().items() if pid not in before
            and (b"sandbox_guard" in cmd or cmd.startswith(b"sleep\x0030") or uid == 65534)]


def test_build_program_is_prompt_completion_test_check():
    program = build_program(ADD, GOOD)
    assert program == ADD["prompt"] + GOOD + "\n" + ADD["test"] + "\ncheck(add)"
    assert run_program(program).passed


@pytest.mark.shared_data
def test_canonical_solutions_pass_and_a_wrong_one_fails(shared_data):
    with gzip.open(shared_data / "humaneval" / "HumanEval.jsonl.gz", "rt") as f:
        problems = [json.loads(line) for line in f]
    assert len(problems) == 164
    items = [(p, p["canonical_solution"]) for p in problems] + [(problems[0], "    return not True\n")]
    start = time.monotonic()
    results = check_completions(items, workers=2)
    wall = time.monotonic() - start
    print(f"164 canonical HumanEval solutions through the sandbox, workers=2: {wall:.1f} s")
    failures = [(p["task_id"], r) for p, r in zip(problems, results) if not r.passed]
    assert not failures
    assert results[-1].status == "failed" and results[-1].detail.startswith("AssertionError")
    assert wall < 60  # about 5 s on the 2-core CI machine


def test_wrong_solution_and_syntax_error_fail():
    wrong, broken = check_completions([(ADD, "    return a - b\n"), (ADD, "    return a +\n")])
    assert wrong.status == "failed" and wrong.detail.startswith("AssertionError")
    assert broken.status == "failed" and broken.detail.startswith("SyntaxError")


def test_infinite_loops_time_out_alone():
    timeout = 2.0
    spin, sleep = with_good_neighbours(["while True:\n    pass", "import time\nwhile True:\n    time.sleep(1)"],
                                       timeout=timeout, workers=2)
    for result in (spin, sleep):  # the wall clock, not CPU time: the sleeper uses none
        assert result.status == "timed_out" and timeout <= result.seconds < timeout + 1.0, result
    # the CPU limit is the backstop when nobody is waiting on the clock
    cpu = run_program(build_program(ADD, hostile("while True:\n    pass")), timeout=30, cpu_seconds=1)
    assert cpu.status == "timed_out" and "CPU" in cpu.detail and cpu.seconds < 10, cpu


def test_fork_bombs_fail_alone_and_leave_no_process():
    before = processes()
    bombs = ["import os\nwhile True:\n    os.fork()",
             "import posix\nwhile True:\n    posix.fork()",
             "import multiprocessing, time\nfor _ in range(50):\n"
             "    multiprocessing.Process(target=time.sleep, args=(30,)).start()",
             "import subprocess\nsubprocess.Popen(['sleep', '30'])",
             "import os\nos.system('sleep 30 &')",
             "import os\nos.posix_spawn('/bin/sleep', ['sleep', '30'], {})"]
    threads = ("import threading, time\nfor _ in range(100):\n"
               "    threading.Thread(target=time.sleep, args=(30,)).start()")
    enforced = protections()["nproc_enforced"]  # RLIMIT_NPROC, the OS-level stop, holds for any uid but root
    results = with_good_neighbours(bombs + [threads] * enforced, timeout=5.0, workers=2)
    for code, result in zip(bombs + [threads], results):
        assert result.status == "failed" and result.seconds < 5.0, (code, result)
    assert sandbox_leftovers(before) == []
    assert check_completions([(ADD, GOOD)])[0].passed  # the next sample is unaffected


def test_large_allocations_fail_alone():
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = with_good_neighbours(["blob = bytearray(8 << 30)",
                                    "hoard = []\nwhile True:\n    hoard.append(bytearray(1 << 20))"],
                                   memory_mb=256, timeout=10.0)
    for result in results:
        assert result.status == "failed" and "MemoryError" in result.detail, result
    # ru_maxrss is in KiB: the evaluator did not take the memory
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 64 * 1024


def test_writes_and_deletes_outside_the_work_dir_fail(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    # world-writable: the unprivileged uid alone would not stop this one, the guard and read-only mounts do
    escape = Path(tempfile.gettempdir()) / f"lb-escape-{uuid.uuid4().hex}.txt"
    work_dirs = set(Path(tempfile.gettempdir()).glob("lb-sandbox-*"))
    attacks = [f"open({str(outside / 'a.txt')!r}, 'w').write('x')",
               f"import pathlib\npathlib.Path({str(outside / 'b.txt')!r}).write_text('x')",
               f"import os\nos.open({str(outside / 'c.txt')!r}, os.O_CREAT | os.O_WRONLY)",
               f"import os\nos.makedirs({str(outside / 'd' / 'e')!r})",
               f"open({str(victim)!r}, 'w').write('overwritten')",
               f"import os\nos.remove({str(victim)!r})",
               f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
               f"open({str(escape)!r}, 'w').write('x')"]
    applied = protections()
    if applied["uid_dropped"] or applied["read_only_fs"]:  # past the Python guard, the OS must refuse
        attacks.append(f"import _io\n_io.FileIO({str(victim)!r}, 'w').write(b'overwritten')")
    if applied["read_only_fs"]:
        attacks.append(f"import _io\n_io.FileIO({str(escape)!r}, 'w')")
    for code, result in zip(attacks, with_good_neighbours(attacks)):
        assert result.status == "failed" and "Error" in result.detail, (code, result)
    assert victim.read_text() == "keep me"
    assert list(outside.iterdir()) == [] and not escape.exists()
    # its own work dir is writable, and removed afterwards
    scratch = ("import os\nopen('notes.txt', 'w').write('x')\nos.mkdir('sub')\n"
               "assert open('notes.txt').read() == 'x'")
    assert with_good_neighbours([scratch])[0].passed
    assert set(Path(tempfile.gettempdir()).glob("lb-sandbox-*")) <= work_dirs


def test_network_connections_fail_and_send_nothing():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        attacks = [f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')",
                   f"import socket\ns = socket.socket()\ns.connect(('127.0.0.1', {port}))\ns.sendall(b'leak')",
                   f"import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=2)"]
        if protections()["net_namespace"]:  # the raw socket type, past the guard: no route in the namespace
            attacks.append(f"import socket\nraw = socket.socket.__mro__[2]()\nraw.connect(('127.0.0.1', {port}))\n"
                           "raw.send(b'leak')")
        for code, result in zip(attacks, with_good_neighbours(attacks, timeout=5.0)):
            assert result.status == "failed", (code, result)
        server.settimeout(0.3)
        with pytest.raises(TimeoutError):
            server.accept()


def test_a_sample_cannot_pass_by_exiting():
    exits = ["import os\nos._exit(0)", "import sys\nsys.exit(0)", "raise SystemExit",
             "import os\nos.write(1, b'passed')\nos._exit(0)"]
    for code, result in zip(exits, with_good_neighbours(exits)):
        assert result.status == "failed", (code, result)


def test_protections_are_recorded():
    applied = protections()
    assert applied["guard"] and applied["fresh_process"] and applied["process_group_kill"]
    assert applied["rlimits"]["nproc"] == 1 and applied["rlimits"]["core"] == 0
    assert applied["rlimits"]["as_mb"] == 1024
    if os.geteuid() == 0:  # root must not run samples as root
        assert applied["uid_dropped"] and applied["uid"] != 0 and applied["nproc_enforced"]


@pytest.mark.parametrize("call, message", [
    (lambda: run_program("pass", timeout=0), "timeout must be a positive number"),
    (lambda: run_program("pass", memory_mb=16), "memory_mb must be an integer >= 128"),
    (lambda: run_program("pass", cpu_seconds=0), "cpu_seconds must be a positive integer"),
    (lambda: run_program(b"pass"), "a program must be a string"),
    (lambda: check_completions([(ADD, GOOD)], workers=0), "workers must be a positive integer"),
    (lambda: check_completions([ADD]), "items must be a list of"),
    (lambda: build_program({"prompt": "x"}, GOOD), "needs string fields prompt, test, entry_point"),
    (lambda: build_program(ADD, None), "a completion must be a string"),
])
def test_bad_input_is_a_config_error(call, message):
    with pytest.raises(ConfigError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_result_type():
    result = run_program("pass")
    assert isinstance(result, ExecutionResult) and result.passed and result.detail == ""
    assert 0 < result.seconds < 10
