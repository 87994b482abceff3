#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would one by one.

Most test binaries wait (on servers, processes, a cloud's answers) far more than they
compute, so running a few at once shortens a run without more cores. Usage:

    scripts/run-tests.py [--jobs N] [--timeout SECONDS] [-- TEST ARGS...]

It builds every target once (`cargo test --no-run --all-targets`: the benches and
examples too, so they keep compiling, though only tests run), then runs each test binary
in its package's directory with the package variables `cargo test` sets (CARGO,
CARGO_MANIFEST_DIR, CARGO_MANIFEST_PATH, CARGO_PKG_NAME, CARGO_PKG_VERSION), up to N at
a time (WASM_CCM_TEST_JOBS, default 3), the slowest first; then the doc tests. Each
binary's output goes to target/test-logs/NAME.log and is printed whole when it ends,
never interleaved; what is still running is listed every minute, with how busy the
machine's CPUs were over it (from /proc/stat: when they are not all busy, more binaries
at once would end sooner). A binary running past the timeout (WASM_CCM_TEST_TIMEOUT,
default 1800 s) is killed with its processes and counts as failed. A table of the
binaries, their result, time and CPU seconds ends the run, which fails when any binary
failed, naming them. Ctrl-C or SIGTERM stops every binary and starts no other.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "target" / "test-logs"

# The binaries that take longest, slowest first (seconds on an idle 2-core machine, one
# at a time): started first, so the short ones fill the other slots around them.
SLOWEST = [
    "openstack_oracle",  # 270: three runs of occm and wasm-ccm
    "openstack",  # 225
    "aws_oracle",  # 160
    "new_provider",  # 75
    "hostile_secure_port",  # 70
    "playground",  # 60
    "controllers",  # 45
    "hostile_broker",  # 45
    "aws",  # 35
    "layout",  # 35
    "keystone",  # 30
]


class Job:
    def __init__(self, name, argv, cwd, env):
        self.name = name
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.code = None
        self.seconds = 0.0
        # CPU seconds of the binary and the processes it waited for (not those it left
        # to exit after it).
        self.cpu = 0.0
        self.started = None
        self.process = None

    @property
    def log(self):
        return LOGS / (self.name.replace(" ", "-").replace("(", "").replace(")", "") + ".log")


def cargo():
    return os.environ.get("CARGO") or shutil.which("cargo") or "cargo"


def packages():
    """The workspace's packages by ID: name, version and manifest path."""
    metadata = subprocess.run(
        [cargo(), "metadata", "--locked", "--no-deps", "--format-version", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    )
    return {p["id"]: p for p in json.loads(metadata.stdout)["packages"]}


def test_binaries(test_args):
    """Builds every target and answers a Job per test binary, in cargo's order."""
    build = subprocess.run(
        [cargo(), "test", "--locked", "--no-run", "--all-targets", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    if build.returncode != 0:
        sys.exit(f"run-tests: building the tests failed (cargo test --no-run --all-targets: exit {build.returncode})")
    by_id = packages()
    jobs = []
    for line in build.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        target = message["target"]
        if not message.get("executable") or not message["profile"]["test"]:
            continue
        if "bench" in target["kind"] or "example" in target["kind"]:
            continue
        package = by_id[message["package_id"]]
        manifest = Path(package["manifest_path"])
        name = target["name"]
        if "test" not in target["kind"]:
            # A crate's own unit tests (lib or bin).
            name = f"{name} (unit)"
        env = dict(os.environ)
        # CI compiles the workspace through Clippy (.ci/run); the cargo commands a test
        # runs build as a user's would.
        env.pop("RUSTC_WORKSPACE_WRAPPER", None)
        env.update(
            {
                "CARGO": cargo(),
                "CARGO_MANIFEST_DIR": str(manifest.parent),
                "CARGO_MANIFEST_PATH": str(manifest),
                "CARGO_PKG_NAME": package["name"],
                "CARGO_PKG_VERSION": package["version"],
            }
        )
        jobs.append(Job(name, [message["executable"], *test_args], manifest.parent, env))
    return jobs


def order(jobs):
    rank = {name: i for i, name in enumerate(SLOWEST)}
    return sorted(jobs, key=lambda j: rank.get(j.name, len(SLOWEST)))


class Runner:
    def __init__(self, jobs, slots, timeout):
        self.pending = list(jobs)
        self.running = []
        self.slots = slots
        self.timeout = timeout
        self.lock = threading.Lock()
        self.stopping = False

    def stop(self, *_):
        """Starts no other binary and kills the running ones with their processes."""
        with self.lock:
            self.stopping = True
            self.pending.clear()
            running = list(self.running)
        for job in running:
            kill(job)

    def worker(self):
        while True:
            with self.lock:
                if not self.pending or self.stopping:
                    return
                job = self.pending.pop(0)
                self.running.append(job)
                job.started = time.monotonic()
                # Its own process group, so a kill reaches the servers it started.
                with open(job.log, "wb") as log:
                    job.process = subprocess.Popen(
                        job.argv,
                        cwd=job.cwd,
                        env=job.env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            # wait4 rather than Popen.wait, for the binary's CPU time; a timer kills it
            # past the timeout.
            expired = threading.Event()

            def expire(job=job, expired=expired):
                expired.set()
                kill(job)

            timer = threading.Timer(self.timeout, expire)
            timer.daemon = True
            timer.start()
            try:
                _, status, usage = os.wait4(job.process.pid, 0)
                job.code = os.waitstatus_to_exitcode(status)
                job.process.returncode = job.code
                job.cpu = usage.ru_utime + usage.ru_stime
            except ChildProcessError:
                # Reaped elsewhere (SIGCHLD ignored): its code, without its CPU time.
                job.code = job.process.wait()
            finally:
                timer.cancel()
            timed_out = expired.is_set()
            job.seconds = time.monotonic() - job.started
            with self.lock:
                self.running.remove(job)
                if timed_out:
                    verdict = f"FAILED (killed after {self.timeout:.0f} s)"
                elif job.code == 0:
                    verdict = "ok"
                else:
                    verdict = f"FAILED (exit {job.code})"
                out = sys.stdout.buffer
                out.write(f"\n== {job.name}: {verdict} in {job.seconds:.0f} s, {job.cpu:.0f} s of CPU ({clock()})\n".encode())
                out.write(job.log.read_bytes())
                out.flush()

    def report(self):
        """Every minute, which binaries are still running and for how long, and how busy
        the CPUs were over that minute."""
        before = cpu_times()
        while True:
            time.sleep(60)
            with self.lock:
                if not self.running and not self.pending:
                    return
                now = time.monotonic()
                running = ", ".join(f"{j.name} ({now - j.started:.0f} s)" for j in self.running)
            after = cpu_times()
            print(f"-- {clock()} running: {running}; {len(self.pending)} waiting; CPU {busy(before, after)}", flush=True)
            before = after

    def run(self):
        threading.Thread(target=self.report, daemon=True).start()
        workers = [threading.Thread(target=self.worker) for _ in range(self.slots)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()


def kill(job):
    try:
        os.killpg(job.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cpu_times():
    """The machine's CPU time so far, busy and in all (jiffies, /proc/stat), or None
    where there is no /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal (guest time is within user).
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return (total - idle, total)


def busy(before, after):
    """How busy the CPUs were between two cpu_times(), as a percentage."""
    if before is None or after is None or after[1] == before[1]:
        return "busy unknown"
    return f"{100 * (after[0] - before[0]) / (after[1] - before[1]):.0f}% busy"


def clock():
    return time.strftime("%H:%M:%S")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("WASM_CCM_TEST_JOBS", "3")),
        help="test binaries run at once (default 3)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("WASM_CCM_TEST_TIMEOUT", "1800")),
        help="seconds a binary may run before it is killed (default 1800)",
    )
    parser.add_argument("test_args", nargs="*", help="passed to every test binary (after --)")
    args = parser.parse_args()
    if args.jobs < 1:
        sys.exit("run-tests: --jobs must be at least 1")
    LOGS.mkdir(parents=True, exist_ok=True)
    jobs = order(test_binaries(args.test_args))
    jobs.append(Job("doc tests", [cargo(), "test", "--locked", "--doc", "--", *args.test_args], ROOT, dict(os.environ)))
    runner = Runner(jobs, args.jobs, args.timeout)
    signal.signal(signal.SIGINT, runner.stop)
    signal.signal(signal.SIGTERM, runner.stop)
    started, cpu = time.monotonic(), cpu_times()
    runner.run()
    if runner.stopping:
        sys.exit("run-tests: stopped")
    print(
        f"\n== {len(jobs)} test binaries, {args.jobs} at a time, in {time.monotonic() - started:.0f} s"
        f" (CPU {busy(cpu, cpu_times())}, {os.cpu_count()} CPUs)"
    )
    width = max(len(j.name) for j in jobs)
    for job in sorted(jobs, key=lambda j: -j.seconds):
        verdict = "ok" if job.code == 0 else "FAILED"
        print(f"  {job.name:<{width}}  {verdict:<6}  {job.seconds:6.1f} s  {job.cpu:6.1f} s CPU")
    failed = [j.name for j in jobs if j.code != 0]
    if failed:
        sys.exit(f"run-tests: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
