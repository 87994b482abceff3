#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side, as `cargo test` would one by one.

Most test binaries wait (on servers, processes, a cloud's answers) far more than they
compute, so running a few at once shortens a run without more cores. Usage:

    scripts/run-tests.py [--jobs N] [-- TEST ARGS...]

It builds every test target once (`cargo test --no-run`), then runs each binary in its
package's directory with the environment `cargo test` gives it, up to N at a time
(WASM_CCM_TEST_JOBS, default 3), the slowest first; then the doc tests. Each binary's
output is printed whole when it ends, never interleaved; a table of the binaries, their
result and time ends the run. It fails when any binary fails, naming them.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The binaries that take longest, slowest first (seconds on an idle 2-core machine):
# started first, so the short ones fill the other slots around them.
SLOWEST = [
    "openstack",  # 225
    "aws_oracle",  # 160
    "openstack_oracle",  # 120
    "new_provider",  # 75
    "playground",  # 60
    "hostile_secure_port",  # 45
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


def test_binaries(test_args):
    """Builds the test targets and answers a Job per binary, in cargo's order."""
    build = subprocess.run(
        ["cargo", "test", "--locked", "--no-run", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    if build.returncode != 0:
        sys.exit(f"run-tests: building the tests failed (cargo test --no-run: exit {build.returncode})")
    jobs = []
    for line in build.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact":
            continue
        if not message.get("executable") or not message["profile"]["test"]:
            continue
        target = message["target"]
        manifest = Path(message["manifest_path"])
        package = message["package_id"]
        name = target["name"]
        if "test" not in target["kind"]:
            # A crate's own unit tests (lib or bin).
            name = f"{name} (unit)"
        env = dict(os.environ)
        env["CARGO_MANIFEST_DIR"] = str(manifest.parent)
        env["CARGO_PKG_NAME"] = package_name(package, manifest)
        env["CARGO_CRATE_NAME"] = target["name"].replace("-", "_")
        jobs.append(Job(name, [message["executable"], *test_args], manifest.parent, env))
    return jobs


def package_name(package_id, manifest):
    """The package's name: from its ID (`path+file:///...#name@0.1.0`) or its folder."""
    tail = package_id.rsplit("#", 1)[-1]
    name = tail.split("@", 1)[0]
    return name if name and "/" not in name else manifest.parent.name


def order(jobs):
    rank = {name: i for i, name in enumerate(SLOWEST)}
    return sorted(jobs, key=lambda j: rank.get(j.name, len(SLOWEST)))


def run(jobs, slots):
    pending = list(jobs)
    lock = threading.Lock()
    out = sys.stdout

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                job = pending.pop(0)
            with tempfile.TemporaryFile(mode="w+") as log:
                started = time.monotonic()
                job.code = subprocess.call(
                    job.argv, cwd=job.cwd, env=job.env, stdout=log, stderr=subprocess.STDOUT
                )
                job.seconds = time.monotonic() - started
                log.seek(0)
                text = log.read()
            with lock:
                verdict = "ok" if job.code == 0 else f"FAILED (exit {job.code})"
                out.write(f"\n== {job.name}: {verdict} in {job.seconds:.0f} s ({time.strftime('%H:%M:%S')})\n")
                out.write(text)
                out.flush()

    threads = [threading.Thread(target=worker) for _ in range(slots)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs",
        type=int,
        default=int(os.environ.get("WASM_CCM_TEST_JOBS", "3")),
        help="test binaries run at once",
    )
    parser.add_argument("test_args", nargs="*", help="passed to every test binary (after --)")
    args = parser.parse_args()
    if args.jobs < 1:
        sys.exit("run-tests: --jobs must be at least 1")
    jobs = order(test_binaries(args.test_args))
    doc = dict(os.environ)
    jobs.append(Job("doc tests", ["cargo", "test", "--locked", "--doc", "--", *args.test_args], ROOT, doc))
    started = time.monotonic()
    run(jobs, args.jobs)
    print(f"\n== {len(jobs)} test binaries, {args.jobs} at a time, in {time.monotonic() - started:.0f} s")
    width = max(len(j.name) for j in jobs)
    for job in sorted(jobs, key=lambda j: -j.seconds):
        verdict = "ok" if job.code == 0 else "FAILED"
        print(f"  {job.name:<{width}}  {verdict:<6}  {job.seconds:6.1f} s")
    failed = [j.name for j in jobs if j.code != 0]
    if failed:
        sys.exit(f"run-tests: failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
