"""Reliability of watching another process (issue 24): ``attach(pid)`` keeps the
stats fds it duplicated once and never reads an fd number again; the helper
that takes another process's fd refuses anything that is not a KVM stats fd;
``vcpulab watch`` ends when its process does; mounts are made by mount(2),
never by a ``mount`` program from PATH.

Every real process is a subprocess with a timeout; bounds on time are generous
(a loaded 2-CPU machine): a hang fails, slowness does not."""

from __future__ import annotations

import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vcpulab import _core
from vcpulab.kvm import Host

ENV = {**os.environ, "RUST_BACKTRACE": "0"}
MARKER = b"SECRET!!"


def _forged_stats(marker: bytes = MARKER) -> bytes:
    """A file laid out like a KVM stats file (header, id, one descriptor "exits",
    data = marker): what a check of the header alone would accept."""
    name_size, ndesc = 48, 1
    id_off = 24
    desc_off = id_off + name_size
    data_off = desc_off + ndesc * (16 + name_size)
    blob = struct.pack("<6I", 0, name_size, ndesc, id_off, desc_off, data_off)
    blob += b"kvm-1/vcpu-0".ljust(name_size, b"\0")
    blob += struct.pack("<IhHII", 0, 0, 1, 0, 0) + b"exits".ljust(name_size, b"\0")
    return blob + marker


def _links(pid: int | str = "self") -> dict[int, str]:
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(fd)] = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return out


# a process that ran a vCPU on its main thread, waits, closes its VM and lets the
# numbers be reused by what REUSE names, then waits to be killed
TARGET = """
import gc, os, sys, time
from vcpulab.kvm import Host
vm = Host().create_vm(memory_mib=4); v = vm.create_vcpu(0)
v.start(vm.load("pause_loop", iterations=10)); v.run_program(timeout_s=30)
print("ready", flush=True); sys.stdin.readline()
vm.close(); del v, vm; gc.collect()
keep = []
if REUSE == "file":
    keep = [open(SECRET, "rb") for _ in range(8)]
else:  # another VM's vCPU stats fd under the same numbers: a KVM stats fd, but not the one attached
    vm2 = Host().create_vm(memory_mib=4); v2 = vm2.create_vcpu(0); v2.stats()
print("reused", flush=True); time.sleep(60)
"""


@pytest.mark.parametrize("reuse", ["file", "another_vm"])
def test_attach_reads_the_stats_fd_it_took_never_a_reused_number(kvm_host: Host, tmp_path, reuse: str) -> None:  # type: ignore[no-untyped-def]
    from vcpulab.kvm import attach

    secret = tmp_path / "secret.bin"
    secret.write_bytes(_forged_stats())
    code = f"REUSE = {reuse!r}; SECRET = {str(secret)!r}\n" + TARGET
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV
    )
    try:
        assert p.stdout is not None and p.stdin is not None
        assert p.stdout.readline().strip() == "ready"
        mine_before = sum("kvm-vcpu-stats" in t for t in _links().values())
        with attach(p.pid) as a:
            assert list(a.stats_fds) == [0]
            fd = a.stats_fds[0]
            first, _ = a.sample_once()
            assert first["exits"].to_list()[0] >= 1  # read from the kept duplicate
            assert sum("kvm-vcpu-stats" in t for t in _links().values()) == mine_before + 1
            p.stdin.write("go\n")
            p.stdin.flush()
            assert p.stdout.readline().strip() == "reused"
            now = os.readlink(f"/proc/{p.pid}/fd/{fd}")
            if reuse == "file":
                assert now == str(secret), now
            elif now != "anon_inode:kvm-vcpu-stats:0":
                pytest.skip(f"the target did not reuse fd {fd} for the new VM's stats ({now})")
            after, _ = a.sample_once()
            values = {v for c in after.columns for v in after[c].to_list()}
            assert struct.unpack("<Q", MARKER)[0] not in values
            # the target let go of the attached stats file: its KVM columns end, and so does
            # the duplicate (which kept the closed VM alive in the kernel)
            assert "exits" not in after.columns or after["exits"].is_null().all(), after
            assert any("closed its stats fd" in n for n in a.notes), a.notes
            assert sum("kvm-vcpu-stats" in t for t in _links().values()) == mine_before
            assert after.height == 1  # the thread is still sampled
        with pytest.raises(ValueError, match="closed"):
            a.sample_once()
    finally:
        p.kill()
        p.communicate(timeout=30)  # reaps it and closes the pipes


def test_the_foreign_fd_helper_refuses_anything_but_a_kvm_stats_fd(kvm_host: Host, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """_core.ForeignProcess.take_stats_fd duplicates one fd of a process and keeps
    it only if it is a KVM stats fd; here the process is this one."""
    vm = kvm_host.create_vm(memory_mib=4)
    v = vm.create_vcpu(0)
    v.stats()  # makes the vCPU's stats fd
    forged = tmp_path / "anon_inode:kvm-vcpu-stats:0"  # a regular file named like one, with a header like one
    forged.write_bytes(_forged_stats())
    memfd = os.memfd_create("anon_inode:kvm-vcpu-stats:0")
    os.write(memfd, _forged_stats())
    r, w = os.pipe()
    efd = os.eventfd(0)
    files = [open(forged, "rb"), open("/dev/null", "rb"), open(tmp_path / "plain", "wb")]
    me = _core.ForeignProcess(os.getpid())
    try:
        links = _links()
        by_link = {t: fd for fd, t in links.items()}
        cases = {
            "ordinary file": (files[2].fileno(), str(tmp_path / "plain")),
            "file named like a stats fd": (files[0].fileno(), str(forged)),
            "memfd named like a stats fd": (memfd, "/memfd:anon_inode:kvm-vcpu-stats:0"),
            "pipe": (r, "pipe:["),
            "/dev/null": (files[1].fileno(), "/dev/null"),
            "eventfd (another anonymous inode)": (efd, "anon_inode:[eventfd]"),
            "KVM VM fd": (by_link["anon_inode:kvm-vm"], "anon_inode:kvm-vm"),
            "KVM vCPU fd": (by_link["anon_inode:kvm-vcpu:0"], "anon_inode:kvm-vcpu:0"),
            "/dev/kvm": (by_link["/dev/kvm"], "/dev/kvm"),
        }
        for what, (fd, shown) in cases.items():
            with pytest.raises(ValueError, match="not a KVM stats fd") as e:
                me.take_stats_fd(fd)
            assert shown in str(e.value) and f"fd {fd} of process {os.getpid()}" in str(e.value), (what, e.value)
        with pytest.raises(ValueError, match="fd must be >= 0"):
            me.take_stats_fd(-1)
        with pytest.raises(OSError, match="pidfd_getfd"):
            me.take_stats_fd(max(links) + 100)  # no such fd
        # the real one is taken, and reads
        s = me.take_stats_fd(by_link["anon_inode:kvm-vcpu-stats:0"])
        assert (s.vcpu, s.id.endswith("/vcpu-0"), s.held()) == (0, True, True)
        assert isinstance(s.read()["exits"], int)
        s.close()
        assert s.closed and s.held() is False
        with pytest.raises(ValueError, match="ForeignStats is closed"):
            s.read()
    finally:
        me.close()
        for f in files:
            f.close()
        for fd in (memfd, r, w, efd):
            os.close(fd)
        vm.close()
    with pytest.raises(ValueError, match="ForeignProcess is closed"):
        me.take_stats_fd(0)
    with pytest.raises(ProcessLookupError):
        _core.ForeignProcess(2**22 + 1)  # above pid_max's largest value: never a process
    with pytest.raises(ValueError, match="pid"):
        _core.ForeignProcess(0)


VMM = """
import time
from vcpulab.kvm import Host
vm = Host().create_vm(memory_mib=4); v = vm.create_vcpu(0)
v.start(vm.load("pause_loop", iterations=10)); v.run_program(timeout_s=30)
print("ready", flush=True); time.sleep(120)
"""


@pytest.mark.parametrize("how", ["reaped", "zombie"])
def test_watch_ends_soon_after_its_process_exits(kvm_host: Host, how: str) -> None:
    """`vcpulab watch PID` ends (status 0, one line) once PID has exited, even
    with an interval far longer than the wait allowed: it waits on the pidfd.
    A zombie (exited, not reaped: its /proc entry stays) counts as exited."""
    target = subprocess.Popen([sys.executable, "-c", VMM], stdout=subprocess.PIPE, text=True, env=ENV)
    w = None
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        w = subprocess.Popen(
            [sys.executable, "-m", "vcpulab.cli", "watch", str(target.pid), "--interval-s", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**ENV, "PYTHONUNBUFFERED": "1"},
        )
        assert w.stdout is not None
        assert w.stdout.readline().startswith(f"watching pid {target.pid}")
        target.send_signal(signal.SIGKILL)
        if how == "reaped":
            target.wait()
        else:
            while Path(f"/proc/{target.pid}/stat").read_text().split(")")[-1].split()[0] != "Z":
                time.sleep(0.05)
        t0 = time.monotonic()
        out, err = w.communicate(timeout=30)
        waited_s = time.monotonic() - t0
        assert w.returncode == 0, err
        assert re.search(rf"process {target.pid} \(.*\) exited; watch ends", out), out
        assert waited_s < 10, waited_s  # the interval is 60 s
        assert "no vCPU thread alive" not in out
    finally:
        for p in (w, target):
            if p is not None:
                if p.poll() is None:
                    p.kill()
                p.communicate(timeout=30)


def test_attached_knows_when_its_process_exited(kvm_host: Host) -> None:
    from vcpulab.kvm import attach

    target = subprocess.Popen([sys.executable, "-c", VMM], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        a = attach(target.pid)
        assert not a.exited() and not a.wait_exited(0.05)
        target.kill()
        assert a.wait_exited(30)  # returns when it exits, long before 30 s
        threads, _ = a.sample_once()
        assert threads.height == 0 and not a._kept
        assert any("the process exited" in n for n in a.notes), a.notes
        with pytest.raises(ValueError, match="timeout_s"):
            a.wait_exited(-1)
        a.close()
        a.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            a.exited()
    finally:
        target.kill()
        target.communicate(timeout=30)


def test_mount_helper_takes_only_debugfs_and_tracefs() -> None:
    for bad in ["proc", "/sys/kernel/debug", "", "tmpfs"]:
        with pytest.raises(ValueError, match="'debugfs' or 'tracefs'"):
            _core.mount_pseudo_fs(bad)


NO_MOUNT_PROGRAM = r"""
set -e
umount /sys/kernel/debug/tracing 2>/dev/null || true
umount /sys/kernel/tracing 2>/dev/null || true
umount /sys/kernel/debug 2>/dev/null || true
export PATH="{bin}:$PATH"
mounted() {{ awk -v p="$1" -v t="$2" '$5 == p && $0 ~ (" - " t " ") {{ found = 1 }} END {{ exit !found }}' /proc/self/mountinfo; }}
if mounted /sys/kernel/debug debugfs; then echo "debugfs still mounted"; exit 3; fi
{py} -c '
import logging; logging.basicConfig(format="LOG %(levelname)s %(message)s")
from vcpulab import _attach, _mounts
print("kvm folder:", _attach._debugfs_kvm())
print("again:", _mounts.ensure_mounted("debugfs"))
'
mounted /sys/kernel/debug debugfs && echo "debugfs mounted"
umount /sys/kernel/debug
{py} -c '
import logging; logging.basicConfig(format="LOG %(levelname)s %(message)s")
from vcpulab import twins
print("sched knobs:", twins._mount_debugfs())
'
mounted /sys/kernel/debug debugfs && echo "debugfs mounted again"
umount /sys/kernel/debug/tracing 2>/dev/null || true
umount /sys/kernel/debug  # else the Tracer finds tracefs automounted at /sys/kernel/debug/tracing
if mounted /sys/kernel/tracing tracefs; then echo "tracefs still mounted"; exit 3; fi
{py} -c '
import logging; logging.basicConfig(format="LOG %(levelname)s %(message)s")
from vcpulab import tracing
with tracing.Trace([0]) as t:
    t.stop()
print("traced")
'
mounted /sys/kernel/tracing tracefs && echo "tracefs mounted"
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a private mount namespace)")
def test_mounts_are_made_by_syscall_never_by_a_mount_program_from_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """In a private mount namespace (the host's mounts are untouched): with
    debugfs and tracefs unmounted and a fake `mount` first in PATH, attach's
    and twins' debugfs and a Trace's tracefs get mounted, the fake is never
    run, and each mount is said once."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    marker = tmp_path / "fake-mount-ran"
    (bin_ / "mount").write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\nexit 0\n')
    (bin_ / "mount").chmod(0o755)
    script = NO_MOUNT_PROGRAM.format(bin=bin_, py=sys.executable)
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    print(r.stdout, r.stderr)
    if r.returncode != 0 and "unshare failed" in r.stderr:
        pytest.skip(f"no private mount namespace here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert not marker.exists(), marker.read_text()
    assert "debugfs mounted" in r.stdout and "debugfs mounted again" in r.stdout and "tracefs mounted" in r.stdout
    assert "kvm folder: /sys/kernel/debug/kvm" in r.stdout and "again: False" in r.stdout
    assert "sched knobs: True" in r.stdout and "traced" in r.stdout
    said = [ln for ln in r.stderr.splitlines() if ln.startswith("LOG ")]
    assert said == [
        "LOG WARNING vcpulab mounted debugfs at /sys/kernel/debug (it stays mounted after vcpulab exits; "
        "`umount /sys/kernel/debug` removes it)",
        "LOG WARNING vcpulab mounted debugfs at /sys/kernel/debug (it stays mounted after vcpulab exits; "
        "`umount /sys/kernel/debug` removes it)",
        "LOG WARNING vcpulab mounted tracefs at /sys/kernel/tracing (it stays mounted after vcpulab exits; "
        "`umount /sys/kernel/tracing` removes it)",
    ], r.stderr


def test_no_mount_program_is_named_in_the_package() -> None:
    """The one mount implementation is mount(2) in src/kvm/mounts.rs: no
    subprocess of the package runs a mount program."""
    import vcpulab

    pkg = Path(vcpulab.__file__).parent
    for f in pkg.rglob("*.py"):
        text = f.read_text()
        assert '["mount"' not in text and "'mount'," not in text, f


def test_watch_once_as_json_and_a_csv_log(kvm_host: Host, tmp_path: Path) -> None:
    """`vcpulab watch PID --once --json --log FILE` (kvm_stat's -1, and a
    log): one JSON object on stdout naming the process and each vCPU thread's
    rates, the other lines on stderr, the same rows in the CSV, then exit 0;
    the Parquet carries the provenance."""
    import csv

    import polars as pl

    target = subprocess.Popen([sys.executable, "-c", VMM], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert target.stdout is not None
        assert target.stdout.readline().strip() == "ready"
        log, pq = tmp_path / "watch.csv", tmp_path / "watch.parquet"
        args = ["watch", str(target.pid), "--once", "--json", "--interval-s", "0.2"]
        r = subprocess.run(
            [sys.executable, "-m", "vcpulab.cli", *args, "--log", str(log), "--parquet", str(pq)],
            capture_output=True,
            text=True,
            timeout=60,
            env=ENV,
        )
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert len(lines) == 1, r.stdout
        doc = json.loads(lines[0])
        assert doc["pid"] == target.pid and doc["interval_ns"] > 0 and len(doc["vcpus"]) == 1
        row = doc["vcpus"][0]
        assert row["vcpu"] == 0 and 0 <= row["cpu_%"] <= 100
        assert f"watching pid {target.pid}" in r.stderr
        with open(log) as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == 1 and int(rows[0]["tid"]) == row["tid"]
        meta = pl.read_parquet_metadata(pq)
        assert "vcpulab.vcpulab_version" in meta and meta["vcpulab.watch_pid"] == str(target.pid)
        bad = subprocess.run(
            [sys.executable, "-m", "vcpulab.cli", "watch", str(target.pid), "--once", "--count", "2"],
            capture_output=True,
            text=True,
            timeout=60,
            env=ENV,
        )
        assert bad.returncode == 2 and "not allowed with argument" in bad.stderr
    finally:
        target.kill()
        target.communicate(timeout=30)


def _watch_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vcpulab.cli", "watch", *args], capture_output=True, text=True, timeout=60, env=ENV
    )


def _vmm(*argv: str) -> subprocess.Popen[str]:
    """A VMM-like process (one VM, one vCPU thread) with ``argv`` on its command line, once ready."""
    p = subprocess.Popen([sys.executable, "-c", VMM, *argv], stdout=subprocess.PIPE, text=True, env=ENV)
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "ready"
    return p


def test_watch_chooses_its_process_by_guest_name_as_kvm_stat_g(kvm_host: Host) -> None:
    """`vcpulab watch --guest NAME` (kvm_stat -g): the one KVM process whose QEMU
    -name (``-name guest=NAME,...`` or ``-name NAME``) or comm is NAME; none or
    several is an error naming the candidates; no PID at all is a usage error
    that names them too."""
    tag = f"vcpulab-test-{os.getpid()}-{time.monotonic_ns()}"
    procs = []
    try:
        procs.append(_vmm("-name", f"guest={tag}-a,debug-threads=on"))
        procs.append(_vmm("-name", f"{tag}-b"))
        a, b = procs
        for name, want in ((f"{tag}-a", a.pid), (f"{tag}-b", b.pid)):
            r = _watch_cli("--guest", name, "--once", "--json", "--interval-s", "0.2")
            assert r.returncode == 0, r.stderr
            doc = json.loads(r.stdout)
            assert doc["pid"] == want and len(doc["vcpus"]) == 1, doc
            assert f"watching pid {want}" in r.stderr
        r = _watch_cli("--pid", str(b.pid), "--once", "--json", "--interval-s", "0.2")
        assert r.returncode == 0 and json.loads(r.stdout)["pid"] == b.pid, r.stderr
        # both have the same comm: several match
        comm = Path(f"/proc/{a.pid}/comm").read_text().strip()
        assert Path(f"/proc/{b.pid}/comm").read_text().strip() == comm
        r = _watch_cli("--guest", comm, "--once", "--json")
        assert r.returncode == 1, r
        err = json.loads(r.stdout)["error"]
        assert err["type"] == "LookupError" and "choose one with --pid" in err["message"], err
        assert (
            f"{a.pid} ({comm}, guest {tag}-a)" in err["message"]
            and f"{b.pid} ({comm}, guest {tag}-b)" in err["message"]
        )
        # none matches: the candidates are named
        r = _watch_cli("--guest", f"{tag}-c", "--once")
        assert r.returncode == 1 and r.stdout == "", r
        assert f"--guest '{tag}-c': no KVM process" in r.stderr and f"{a.pid} ({comm}, guest {tag}-a)" in r.stderr
        # no process given: a usage error (2) with the candidates
        r = _watch_cli("--once", "--json")
        assert r.returncode == 2, r
        err = json.loads(r.stdout)["error"]
        assert err["type"] == "ValueError" and "watch needs a process" in err["message"]
        assert f"{b.pid} ({comm}, guest {tag}-b)" in err["message"], err
        r = _watch_cli(str(a.pid), "--guest", f"{tag}-a")
        assert r.returncode == 2 and "not allowed with argument" in r.stderr
    finally:
        for p in procs:
            p.kill()
            p.communicate(timeout=30)


def test_watch_redraws_in_place_only_when_asked_or_on_a_terminal(kvm_host: Host) -> None:
    """--refresh clears the screen and draws the header and the table again each
    interval (kvm_stat's screen); --no-refresh, and stdout that is not a
    terminal, print one table after another as before."""
    from vcpulab.cli._watch import _CLEAR_SCREEN

    target = _vmm()
    try:
        r = _watch_cli(str(target.pid), "--count", "2", "--interval-s", "0.2", "--refresh")
        assert r.returncode == 0, r.stderr
        frames = r.stdout.split(_CLEAR_SCREEN)
        assert len(frames) == 3 and frames[0].startswith(f"watching pid {target.pid}"), r.stdout
        for f in frames[1:]:
            assert f.startswith(f"watching pid {target.pid}") and "run_delay_%" in f, f
        for flags in ([], ["--no-refresh"]):  # not a terminal here: scrolling
            r = _watch_cli(str(target.pid), "--count", "2", "--interval-s", "0.2", *flags)
            assert r.returncode == 0, r.stderr
            assert "\x1b[" not in r.stdout and r.stdout.count("run_delay_%") == 2, r.stdout
            assert r.stdout.count(f"watching pid {target.pid}") == 1
        r = _watch_cli(str(target.pid), "--once", "--json", "--refresh")
        assert r.returncode == 2 and json.loads(r.stdout)["error"]["type"] == "ValueError", r
    finally:
        target.kill()
        target.communicate(timeout=30)
