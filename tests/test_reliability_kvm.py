"""Reliability of the real-KVM API (issue 15): boundary checks, interruptible
waits, resource-owning objects that refuse copy/pickle/fork, ownership by
token. Anything that could abort or hang runs in a subprocess with a timeout.
"""

from __future__ import annotations

import copy
import gc
import math
import pickle
import time
from typing import Any

import numpy as np
import pytest
from _subproc import fastest_interrupt, run_py

from vcpulab import calibrate, experiment
from vcpulab.experiment import IpiPingPong, MsiPingPong, Spin, SpinLock

# --------------------------------------------------------------------------- aborts and panics


def test_msi_ping_huge_count_is_a_value_error(kvm_host: Any) -> None:
    p = run_py("""
    from vcpulab.kvm import Host
    vm = Host().create_vm(16)
    v = vm.create_vcpu(0)
    prog = vm.load("wait_interrupts", vector=0x40, count=4)
    for count in (2**40, 2**61, 2**64):
        try:
            vm.msi_ping(v, prog, 0x40, count, 10.0, timeout_s=0.5)
        except ValueError as e:
            print("ValueError", "count" in str(e))
    """)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["ValueError", "True"] * 3


def test_experiment_periods_out_of_range(kvm_host: Any) -> None:
    for kw, name in [
        ({"sample_every_s": 1e19}, "sample_every_s"),
        ({"sample_every_s": 1e20}, "sample_every_s"),
        ({"poll_every_s": 1e19}, "poll_every_s"),
        ({"poll_every_s": 5.0}, "poll_every_s"),
        ({"sample_every_s": float("nan")}, "sample_every_s"),
    ]:
        with pytest.raises(ValueError, match=name):
            experiment.run(Spin(), vcpus=1, pcpus=[0], duration_s=0.05, **kw)


@pytest.mark.parametrize(
    "kw, exc, name",
    [
        ({"duration_s": math.inf}, ValueError, "duration_s"),
        ({"duration_s": 1e6}, ValueError, "duration_s"),
        ({"vcpus": 257}, ValueError, "vcpus"),
        ({"vcpus": 1.5}, TypeError, "vcpus"),
        ({"workload": None}, TypeError, "workload"),
        ({"workload": MsiPingPong(gap_us=math.nan), "vcpus": 1}, ValueError, "gap_us"),
        ({"workload": IpiPingPong(gap_us=math.inf), "vcpus": 2}, ValueError, "gap_us"),
        ({"workload": MsiPingPong(rounds=10, gap_us=30e6), "vcpus": 1, "duration_s": 0.5}, ValueError, "gap_us"),
        ({"memory_mib": 10**9}, ValueError, "memory_mib"),
        ({"halt_poll_ns": -1}, ValueError, "halt_poll_ns"),
        ({"steal_time": "yes"}, TypeError, "steal_time"),
        ({"pcpus": "0"}, TypeError, "pcpus"),
    ],
)
def test_experiment_run_validates_first(kvm_host: Any, kw: dict[str, Any], exc: type, name: str) -> None:
    args: dict[str, Any] = {"workload": Spin(), "vcpus": 1, "pcpus": [0], "duration_s": 0.05}
    args.update(kw)
    t0 = time.monotonic()
    with pytest.raises(exc, match=name):
        experiment.run(**args)
    assert time.monotonic() - t0 < 0.5  # refused before any VM was created


def test_kvm_arguments_name_the_problem(kvm_host: Any) -> None:
    with kvm_host.create_vm(16) as vm:
        v = vm.create_vcpu(0)
        v.start(vm.load("halt"))
        cases = [
            (lambda: v.run_until([], timeout_s=0.2), ValueError, "kind"),
            (lambda: v.run_program(timeout_s=-1), ValueError, "timeout"),
            (lambda: v.run(timeout_s=math.nan), ValueError, "timeout"),
            (lambda: v.run_until("io", port=70000), ValueError, "port"),
            (lambda: vm.send_msi(-1, 0x40), ValueError, "dest_apic_id"),
            (lambda: vm.send_msi(0, 256), ValueError, "vector"),
            (lambda: v.set_msr(2**32, 1), ValueError, "MSR index"),
            (lambda: v.set_msr(0x10, 2**64), ValueError, "value"),
            (lambda: vm.create_vcpu("1"), TypeError, "id"),
            (lambda: kvm_host.create_vm(2**64), ValueError, "memory_mib"),
            (lambda: vm.write(0x100000, 5), TypeError, "data"),
            (lambda: vm.write_u64(0x100000, -1), ValueError, "value"),
            (lambda: vm.read(2**64, 1), ValueError, "gpa"),
            (lambda: vm.msi_train(0, 0x40, 2, math.inf), ValueError, "gap_us"),
            (lambda: vm.load("spin_lock", kind=5, vcpus=1), TypeError, "spin_lock"),
            (lambda: v.set_regs(rax=-1), ValueError, "rax"),
        ]
        for f, exc, name in cases:
            t0 = time.monotonic()
            with pytest.raises(exc, match=name):
                f()
            assert time.monotonic() - t0 < 0.1, name  # no wait for a timeout
        # numpy integers are ints
        assert vm.create_vcpu(np.int64(3)).id == 3


# --------------------------------------------------------------------------- silent wrong results


def test_kernel_resource_owners_refuse_copy_and_pickle(kvm_host: Any) -> None:
    with kvm_host.create_vm(16) as vm:
        v = vm.create_vcpu(0)
        for obj in (kvm_host, vm, v):
            for f in (copy.copy, copy.deepcopy, pickle.dumps):
                with pytest.raises(TypeError, match="cannot be"):
                    f(obj)
        gc.collect()
        assert not vm.closed  # the attempts closed nothing
        v.set_regs(rax=7)
        assert v.regs.rax == 7


def test_program_of_a_dead_vm_is_refused(kvm_host: Any) -> None:
    vm = kvm_host.create_vm(16)
    prog = vm.load("pause_loop", iterations=5)
    vm.close()
    del vm
    gc.collect()
    # new VMs may get the old one's id(); the token differs
    for _ in range(5):
        with kvm_host.create_vm(16) as vm2:
            v = vm2.create_vcpu(0)
            with pytest.raises(ValueError, match="another VM"):
                v.start(prog)
            with pytest.raises(ValueError, match="another VM"):
                vm2.results(prog)


def test_vm_write_rejects_non_bytes(kvm_host: Any) -> None:
    with kvm_host.create_vm(16) as vm:
        vm.write(0x100000, b"\xff" * 8)
        with pytest.raises(TypeError):
            vm.write(0x100000, 5)  # type: ignore[arg-type]
        assert vm.read(0x100000, 8) == b"\xff" * 8


# --------------------------------------------------------------------------- hangs


def test_msi_train_gap_interrupted_by_ctrl_c(kvm_host: Any) -> None:
    code = """
    import threading, time
    from vcpulab.kvm import Host
    vm = Host().create_vm(16)
    v = vm.create_vcpu(0)
    prog = vm.load("wait_interrupts", vector=0x40, count=1000)
    v.start(prog)
    threading.Thread(target=lambda: v.run_program(timeout_s=30), daemon=True).start()
    t_end = time.monotonic() + 10
    while vm.results(prog)["halts"][0] < 1 and time.monotonic() < t_end:
        time.sleep(0.01)  # the guest has enabled its LAPIC and halts
    print("READY", flush=True)
    try:
        vm.msi_train(0, 0x40, 2, gap_us=20e6)
    except KeyboardInterrupt:
        print("KI")
    """

    def check(out: str, err: str) -> None:
        assert "KI" in out, (out, err)

    assert fastest_interrupt(code, 0.5, check) < 1.0


def test_msi_train_gap_stops_on_close(kvm_host: Any) -> None:
    import threading

    with kvm_host.create_vm(16) as vm:
        v = vm.create_vcpu(0)
        prog = vm.load("wait_interrupts", vector=0x40, count=1000)
        v.start(prog)
        threading.Thread(target=lambda: _quiet(lambda: v.run_program(timeout_s=10)), daemon=True).start()
        t_end = time.monotonic() + 10
        while vm.results(prog)["halts"][0] < 1 and time.monotonic() < t_end:
            time.sleep(0.01)  # the guest has enabled its LAPIC and halts
        threading.Timer(0.3, vm.close).start()
        t0 = time.monotonic()
        r = vm.msi_train(0, 0x40, 3, gap_us=20e6)
        assert time.monotonic() - t0 < 1.0
        assert r.sent == 1  # the first MSI goes at once; the close ended the first gap


def test_msi_ping_gap_bounded_by_timeout(kvm_host: Any) -> None:
    import threading

    with kvm_host.create_vm(16) as vm:
        v = vm.create_vcpu(0)
        prog = vm.load("wait_interrupts", vector=0x40, count=1000)
        v.start(prog)
        threading.Thread(target=lambda: _quiet(lambda: v.run_program(timeout_s=10)), daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="gap_us"):
            vm.msi_ping(v, prog, 0x40, 3, gap_us=8e6, timeout_s=0.5)
        # a gap shorter than the timeout but rounds that cannot all fit: TimeoutError at the deadline
        with pytest.raises(TimeoutError):
            vm.msi_ping(v, prog, 0x40, 3, gap_us=0.4e6, timeout_s=0.5)
        assert time.monotonic() - t0 < 1.5


def _quiet(f: Any) -> None:
    try:
        f()
    except BaseException:
        pass


def test_experiment_run_ctrl_c(kvm_host: Any) -> None:
    code = """
    from vcpulab import experiment
    from vcpulab.experiment import SpinLock
    print("READY", flush=True)
    try:
        experiment.run(SpinLock(), vcpus=2, pcpus=[0], duration_s=30)
    except KeyboardInterrupt:
        print("KI")
    """

    def check(out: str, err: str) -> None:
        assert "KI" in out, (out, err)

    assert fastest_interrupt(code, 1.0, check) < 1.0


def test_forked_child_gets_a_clear_error(kvm_host: Any) -> None:
    p = run_py(
        """
    import os, signal, threading, time
    from vcpulab.kvm import Host
    vm = Host().create_vm(16)
    v = vm.create_vcpu(0)
    v.start(vm.load("endless_loop"))
    def _run():
        try:
            v.run_until("hlt", timeout_s=3)
        except BaseException:
            pass
    t = threading.Thread(target=_run)
    t.start()
    time.sleep(0.2)
    pid = os.fork()
    if pid == 0:
        signal.alarm(5)
        code = 3
        try:
            v.regs
        except RuntimeError as e:
            code = 0 if "forked" in str(e) else 4
        try:
            v.run(timeout_s=1)  # the instance's run is the extension's: its own fork check
            code = 6
        except RuntimeError as e:
            code = code if "this Vcpu was created in the parent of a forked process" in str(e) else 6
        try:
            vm.memory_mib, Host().create_vm(4).close()  # a new VM in the child works
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    v.kick()
    t.join()
    vm.close()
    """,
        timeout=30,
    )
    assert "child 0" in p.stdout, p.stdout + p.stderr


def test_calibrate_validates_before_measuring(kvm_host: Any) -> None:
    small: dict[str, Any] = dict(gaps_us=[50], max_poll_ns=[0, 50_000], rounds=20, min_cell_s=0)
    for kw, name in [
        ({"seed": -1}, "seed"),
        ({"background_busy_ns": -5}, "background_busy_ns"),
        ({"plot": "/proc/x.png"}, "plot"),
        ({"deadline_s": 0.05, "min_cell_s": 0.1}, "deadline_s"),
        ({"deadline_s": math.inf}, "deadline_s"),
        ({"pcpu": "1"}, "pcpu"),
    ]:
        t0 = time.monotonic()
        with pytest.raises((ValueError, TypeError), match=name):
            calibrate.halt_poll(**{**small, **kw})
        assert time.monotonic() - t0 < 0.1, name


def test_spin_lock_kind_checked(kvm_host: Any) -> None:
    with pytest.raises(ValueError, match="kind"):
        experiment.run(SpinLock(kind="mcs"), vcpus=2, pcpus=[0], duration_s=0.05)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- finalizers


def test_no_python_finalizer_can_swallow_a_ctrl_c() -> None:
    """A KeyboardInterrupt raised inside a Python ``__del__`` is printed as
    "Exception ignored" and lost to the code it should stop: it was seen once
    in 20 fresh-clone suites (tests/test_interrupts.py, run(repeat=100) ran
    all its trials after Ctrl-C, the signal having landed in ``Vm.__del__``
    while the garbage collector freed a finished trial's VM). vcpulab frees
    kernel resources in Rust ``Drop`` instead (src/py/kvm.rs), where no Python
    code runs; no class of the package defines ``__del__``."""
    import importlib
    import inspect
    import pkgutil

    import vcpulab

    with_del = []
    for m in pkgutil.walk_packages(vcpulab.__path__, "vcpulab."):
        if m.name.endswith("pytest_plugin"):
            continue
        mod = importlib.import_module(m.name)
        for _, cls in inspect.getmembers(mod, inspect.isclass):
            if cls.__module__ == mod.__name__ and "__del__" in vars(cls):
                with_del.append(f"{cls.__module__}.{cls.__qualname__}")
    assert with_del == []


def test_a_vm_left_to_the_garbage_collector_is_closed(kvm_host: Any) -> None:
    """Without close(), dropping the last reference to a Vm releases its VM
    and vCPU fds (its core's Drop), in this process and in a forked child
    (which holds copies of the parent's fds; the Drop kicks no vCPU thread
    there: the parent's threads do not exist in the child)."""
    import os

    def kvm_fds() -> int:
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += "kvm" in os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        return n

    gc.collect()
    before = kvm_fds()
    vm = kvm_host.create_vm(16)
    v = vm.create_vcpu(0)
    v.start(vm.load("pause_loop", iterations=10))
    v.run_program(timeout_s=30)
    assert kvm_fds() > before
    del vm, v
    gc.collect()
    assert kvm_fds() == before
    p = run_py(
        """
    import gc, os, threading, time
    from vcpulab.kvm import Host
    def kvm_fds():
        n = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                n += "kvm" in os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                pass
        return n
    host = Host()
    vm = host.create_vm(16)  # its vCPU runs while the process forks
    v = vm.create_vcpu(0)
    v.start(vm.load("endless_loop"))
    t = threading.Thread(target=lambda: v.run_until("hlt", timeout_s=10))
    t.start()
    base = kvm_fds()
    done = host.create_vm(16)  # its vCPU ran on another thread and finished
    d = done.create_vcpu(0)
    d.start(done.load("pause_loop", iterations=10))
    td = threading.Thread(target=lambda: d.run_program(timeout_s=10))
    td.start(); td.join()
    time.sleep(0.2)
    pid = os.fork()
    if pid == 0:
        if kvm_fds() <= base:
            os._exit(4)
        del done, d, td  # the child's copies of its fds (VM, vCPU, their stats): closed by the core's Drop
        gc.collect()
        os._exit(0 if kvm_fds() == base else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    vm.close()  # kicks the running vCPU: its run_until ends (ValueError: closed)
    t.join(5)
    print("joined", not t.is_alive())
    """,
        timeout=30,
    )
    assert "child 0" in p.stdout and "joined True" in p.stdout, p.stdout + p.stderr
