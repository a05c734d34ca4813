"""`--executor ray`: a grid's groups computed by Ray actors (docs/experiments.md, Executors).

Each actor runs the command once up to its grid (`runner.planned`: the same command line, so the same
works and compute; the model loads on the first group it computes) and then computes the groups it is
sent. This process, the driver, claims a group's lock, sends the group to an idle actor and writes the
records that come back through the store: it is the only process that writes (the sweep's one JSON
included), and a cell exists only once its whole record came back. An actor that dies (killed, out of
memory) fails its group, whose cells stay unwritten (a downstream group's progress file lets the next run
resume it); the other groups go on, and the run ends with one line naming the failed ones. An error raised
in a worker (a ConfigError, a bug) stops the run as it would stop a serial one.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections import deque

from filelock import Timeout

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.runner import claimed, planned, write_group

POLL_S = 1.0  # how often groups that another run holds are tried again while workers are idle


def check_ray(options, needed_by: str = "--executor ray", extra: str = "ray") -> None:
    """Ray installed and --ray.address reachable, checked while parsing: ray.init waits minutes for an
    address where nothing listens."""
    try:
        import ray  # noqa: F401
        if extra == "tune":
            import ray.tune  # noqa: F401
    except ImportError as err:
        raise ConfigError(f"{needed_by} needs Ray{' Tune' if extra == 'tune' else ''}, which is not installed: "
                          f"pip install 'lightning_bench[{extra}]'") from err
    if options.address in (None, "auto", "local"):
        return
    host, _, port = options.address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except (OSError, ValueError) as err:
        raise ConfigError(f"--ray.address {options.address}: cannot reach it ({err}); give the address that "
                          "`ray start --head` printed, or leave --ray.address out for a local instance") from err


class _Worker:
    """A Ray actor: builds the command's grid on its first group, then computes every group it is sent. It
    works in the driver's folder where its host has it (a shared file system): relative paths on the
    command line name the same files."""

    def __init__(self, command, folder: str):
        self.command, self.plan = command, None
        if os.path.isdir(folder):
            os.chdir(folder)

    def compute(self, works):
        if self.plan is None:
            self.plan = planned(self.command)
        mine = {work.key: work.settings for work in self.plan[0]}
        for work in works:  # e.g. a worker on another device kind than the driver's: its records would lie
            if mine.get(work.key) != work.settings:
                differ = sorted(k for k, v in work.settings.items() if (mine.get(work.key) or {}).get(k) != v)
                raise ConfigError(f"{work.key}: a Ray worker computes it under other settings than this run's "
                                  f"({', '.join(differ)}); workers need the driver's model, data and device kind "
                                  "(--accelerator, --ray.num_gpus_per_worker)")
        return self.plan[1](works)


class RayExecutor:
    """An executor (runner.run_serial's signature) over Ray actors; `command` builds the grid in each."""

    def __init__(self, options, command):
        self.options, self.command = options, command

    def __call__(self, groups, compute, store, say, check=None) -> dict[str, dict]:
        import ray

        started = not ray.is_initialized()  # an instance the caller started (tests) is the caller's to end
        if started:
            try:
                ray.init(address=self.options.address)
            except (ConnectionError, RuntimeError, ValueError) as err:
                raise ConfigError(f"--ray.address {self.options.address}: {str(err).splitlines()[0]}") from err
        try:
            return self._run(ray, groups, store, say, check)
        finally:
            if started:
                ray.shutdown()

    def _run(self, ray, groups, store, say, check) -> dict[str, dict]:
        actor = ray.remote(num_cpus=self.options.num_cpus_per_worker,
                           num_gpus=self.options.num_gpus_per_worker)(_Worker)
        start = functools.partial(actor.remote, self.command, os.getcwd())
        idle = [start() for _ in range(min(self.options.workers, len(groups)))]
        waiting, busy, records, failed, deferred = deque(groups), {}, {}, [], set()
        try:
            while waiting or busy:
                for _ in range(len(waiting) if idle else 0):  # one pass: each group sent, or tried again later
                    group = waiting.popleft()
                    name, lock = group[0].group, store.lock(group[0].group)
                    try:
                        lock.acquire(timeout=0)
                    except Timeout:
                        if name not in deferred:
                            deferred.add(name)
                            say(name, "another run is computing it; coming back to it after the rest")
                        waiting.append(group)
                        continue
                    done, todo = claimed(group, store, say, check)
                    records.update(done)
                    if not todo:
                        lock.release()
                        continue
                    worker = idle.pop()
                    busy[worker.compute.remote(todo)] = (worker, todo, lock)
                    if not idle:
                        break
                if not busy:  # every group left is held by another run
                    time.sleep(POLL_S)
                    continue
                ready, _ = ray.wait(list(busy), num_returns=1, timeout=POLL_S if waiting and idle else None)
                for ref in ready:
                    worker, todo, lock = busy.pop(ref)
                    try:
                        records.update(write_group(todo, ray.get(ref), store))
                    except ray.exceptions.RayActorError:
                        failed.append(todo[0].group)
                        say(todo[0].group, "its Ray worker died; its cells are not written")
                        worker = start()  # in the dead one's place
                    except ray.exceptions.RayTaskError as err:  # the worker's own exception, as a serial run raises it
                        idle.append(worker)
                        if isinstance(err.cause, BaseException):
                            raise err.cause from err
                        raise
                    finally:
                        lock.release()
                    idle.append(worker)
        finally:
            for worker, _, lock in busy.values():
                lock.release()
                ray.kill(worker)
            for worker in idle:
                ray.kill(worker)
        if failed:
            raise ConfigError(f"--executor ray: the worker computing {', '.join(failed)} died (killed, or out of "
                              "memory); those groups are not written: run the same command again to compute them")
        return records
