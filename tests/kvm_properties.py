"""Property layer for the real-KVM and experiment API (issue 15, item 2).

Hypothesis draws arguments — valid, edge and invalid — for the methods of
Host / Vm / Vcpu, the MSI helpers, ``experiment.run``, ``calibrate.halt_poll``
and the halt-poll model, and checks for every call:

* it returns, or raises an ``Exception`` subclass (never a ``BaseException``
  such as ``pyo3_runtime.PanicException``, never an abort);
* within its deadline (each call's own timeout or duration plus a margin);
* no file descriptor and no thread is left behind once the objects it made
  are closed.

Run as a script (``python tests/kvm_properties.py [--examples N]``): the test
``tests/test_reliability_properties.py`` runs it in a subprocess, so an abort
or a hang (caught by a faulthandler watchdog that kills the process) fails a
test instead of killing pytest.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import math
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vcpulab import calibrate, experiment, sim
from vcpulab.kvm import PROGRAMS, Host
from vcpulab.sim import halt_poll as hp

# --------------------------------------------------------------------------- strategies

#: integers around every boundary the API has (u8, u16, u32, u64, signed, huge)
EDGE_INTS = st.sampled_from(
    [0, 1, -1, 2, 255, 256, 0xFFFF, 0x10000, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, 2**70, -(2**63)]
)
ANY_INT = st.one_of(EDGE_INTS, st.integers(-(2**70), 2**70), st.integers(0, 4096))
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.floats(allow_nan=True),
    st.binary(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
)
ANY = st.one_of(ANY_INT, ODD)
#: timeouts: short valid ones and every kind of invalid one
TIMEOUT = st.one_of(st.floats(0.001, 0.2), st.sampled_from([0.0, -1.0, math.nan, math.inf, 1e6, 1e300]), ODD)
SMALL_GAP_US = st.one_of(st.floats(0, 200), st.sampled_from([-1.0, math.nan, math.inf, 1e12]), ODD)


#: how the calls ended: "returned" or the exception's type name
OUTCOMES: Counter[str] = Counter()


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def call(f: Callable[[], Any], deadline_s: float) -> Any:
    """Run ``f``; an Exception is an allowed answer, anything else propagates.
    Fails when it took longer than ``deadline_s`` (+ 1 s of scheduling slack
    on a loaded 2-CPU machine)."""
    t0 = time.monotonic()
    try:
        r = f()
        OUTCOMES["returned"] += 1
        return r
    except Exception as e:
        OUTCOMES[type(e).__name__] += 1
        if os.environ.get("VCPULAB_PROPERTY_SHOW") and not isinstance(e, (TypeError, ValueError)):
            print(f"{type(e).__name__}: {e}", flush=True)
        return None
    finally:
        dt = time.monotonic() - t0
        assert dt <= deadline_s + 1.0, f"the call took {dt:.2f} s, its deadline is {deadline_s:.2f} s"


def deadline_of(timeout: Any, default: float = 0.0) -> float:
    return (
        float(timeout)
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout < 10
        else default
    )


class NoLeak:
    """Checks that fds and threads return to their count at entry."""

    def __enter__(self) -> NoLeak:
        gc.collect()
        self.fds = fd_count()
        self.threads = threading.active_count()
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        gc.collect()
        t_end = time.monotonic() + 2.0
        while (fd_count() != self.fds or threading.active_count() > self.threads) and time.monotonic() < t_end:
            time.sleep(0.02)  # a helper thread of the call may still be finishing
            gc.collect()
        assert fd_count() == self.fds, f"fd leak: {self.fds} -> {fd_count()}"
        assert threading.active_count() <= self.threads, f"thread leak: {self.threads} -> {threading.active_count()}"


HOST = Host()

# --------------------------------------------------------------------------- Host / Vm


@given(memory_mib=st.one_of(st.integers(-2, 8), ANY), irqchip=st.one_of(st.booleans(), ANY), cap=ANY)
def prop_host(memory_mib: Any, irqchip: Any, cap: Any) -> None:
    with NoLeak():
        call(lambda: HOST.check_extension(cap), 0.1)
        vm = call(lambda: HOST.create_vm(memory_mib, irqchip), 0.5)
        if vm is not None:
            vm.close()


VM_OPS = st.sampled_from(
    [
        "read",
        "write",
        "write_u64",
        "write_u8",
        "load",
        "create_vcpu",
        "halt_poll_ns",
        "disable_exits",
        "send_msi",
        "msi_train",
        "stats",
        "steal_times",
        "results",
    ]
)


@given(
    ops=st.lists(st.tuples(VM_OPS, ANY, ANY, ANY, SMALL_GAP_US), min_size=1, max_size=6),
    program=st.one_of(st.sampled_from(sorted(PROGRAMS)), st.text(max_size=6)),
    params=st.dictionaries(
        st.sampled_from(
            ["iterations", "count", "vector", "port", "value", "size", "kind", "vcpus", "hz", "addr", "bogus"]
        ),
        ANY,
        max_size=3,
    ),
)
def prop_vm(ops: list[tuple[str, Any, Any, Any, Any]], program: Any, params: dict[str, Any]) -> None:
    with NoLeak():
        with HOST.create_vm(4) as vm:
            prog = call(lambda: vm.load("pause_loop", iterations=3), 1.0)
            for op, a, b, c, gap in ops:
                if op == "read":
                    call(lambda: vm.read(a, b), 0.2)
                elif op == "write":
                    call(lambda: vm.write(a, b), 0.2)
                elif op == "write_u64":
                    call(lambda: vm.write_u64(a, b), 0.1)
                elif op == "write_u8":
                    call(lambda: vm.write_u8(a, b), 0.1)
                elif op == "load":
                    call(lambda: vm.load(program, **params), 1.0)
                elif op == "create_vcpu":
                    call(lambda: vm.create_vcpu(a), 0.5)
                elif op == "halt_poll_ns":
                    call(lambda: setattr(vm, "halt_poll_ns", a), 0.1)
                elif op == "disable_exits":
                    call(lambda: vm.disable_exits(pause=bool(a), hlt=b is True, mwait=c is True), 0.1)
                elif op == "send_msi":
                    call(lambda: vm.send_msi(a, b), 0.1)
                elif op == "msi_train":
                    # a valid train lasts count x gap: keep valid ones short (<= 50 x 200 µs)
                    n = 50 if _num(c) and 50 < c < 2**32 else c
                    g = 100.0 if _num(gap) and math.isfinite(gap) and 200 < gap <= 8.64e10 else gap
                    call(lambda: vm.msi_train(a, b, n, g), 0.2)
                elif op == "stats":
                    call(vm.stats, 0.2)
                elif op == "steal_times":
                    call(lambda: vm.steal_times(a), 0.2)
                elif op == "results":
                    call(lambda: vm.results(prog if a is None else a), 0.2)


# --------------------------------------------------------------------------- Vcpu

VCPU_OPS = st.sampled_from(
    [
        "run",
        "run_until",
        "run_program",
        "set_regs",
        "get_msrs",
        "set_msr",
        "start",
        "enable_steal_time",
        "steal_time",
        "kick",
        "stats",
        "io_in_value",
        "sregs",
    ]
)
KINDS = st.one_of(
    st.sampled_from(["hlt", "io", "mmio", "ucall", "shutdown", "interrupted", "bogus"]),
    st.lists(st.sampled_from(["hlt", "io", "ucall"]), max_size=2),
    ODD,
)


@given(
    ops=st.lists(st.tuples(VCPU_OPS, ANY, ANY, KINDS, TIMEOUT), min_size=1, max_size=5),
    program=st.sampled_from(["halt", "pause_loop", "io_out", "endless_loop", "sync", "exception", "triple_fault"]),
)
def prop_vcpu(ops: list[tuple[str, Any, Any, Any, Any]], program: str) -> None:
    with NoLeak():
        with HOST.create_vm(4) as vm:
            v = vm.create_vcpu(0)
            params: dict[str, Any] = {
                "pause_loop": {"iterations": 100},
                "io_out": {"port": 0x80, "value": 1, "size": 1},
                "sync": {"count": 2},
                "exception": {"vector": 6},
            }.get(program, {})
            prog = vm.load(program, **params)
            v.start(prog)
            for op, a, b, kind, timeout in ops:
                dl = deadline_of(timeout)
                if op == "run":
                    call(lambda: v.run(timeout), dl + 0.1)
                elif op == "run_until":
                    call(
                        lambda: v.run_until(
                            kind,
                            count=a if isinstance(a, int) and 0 < a < 5 else a,
                            port=b if b is None or isinstance(b, int) else b,
                            timeout_s=timeout,
                        ),
                        dl + 0.1,
                    )
                elif op == "run_program":
                    call(lambda: v.run_program(timeout), dl + 0.1)
                elif op == "set_regs":
                    call(lambda: v.set_regs(rip=a, rax=b), 0.1)
                elif op == "get_msrs":
                    call(lambda: v.get_msrs([a, b]), 0.1)
                elif op == "set_msr":
                    call(lambda: v.set_msr(a, b), 0.1)
                elif op == "start":
                    call(lambda: v.start(prog if a is None else a), 0.1)
                elif op == "enable_steal_time":
                    call(lambda: v.enable_steal_time(a), 0.1)
                elif op == "steal_time":
                    call(lambda: v.steal_time, 0.1)
                elif op == "kick":
                    call(v.kick, 0.1)
                elif op == "stats":
                    call(v.stats, 0.2)
                elif op == "io_in_value":
                    call(lambda: setattr(v, "io_in_value", a), 0.1)
                elif op == "sregs":
                    call(lambda: v.set_sregs(cr8=a), 0.1)


# --------------------------------------------------------------------------- MSI helpers


@given(
    vector=st.one_of(st.just(0x40), ANY),
    count=st.one_of(st.integers(1, 20), ANY),
    gap_us=SMALL_GAP_US,
    timeout=TIMEOUT,
    halts_before=st.one_of(st.just(0), ANY),
    run_guest=st.booleans(),
)
def prop_msi_ping(vector: Any, count: Any, gap_us: Any, timeout: Any, halts_before: Any, run_guest: bool) -> None:
    with NoLeak():
        with HOST.create_vm(4) as vm:
            v = vm.create_vcpu(0)
            prog = vm.load("wait_interrupts", vector=0x40, count=20)
            v.start(prog)
            t = None
            if run_guest:

                def guest() -> None:
                    try:
                        v.run_program(timeout_s=2.0)
                    except Exception:
                        pass

                t = threading.Thread(target=guest, daemon=True)
                t.start()
            call(
                lambda: vm.msi_ping(v, prog, vector, count, gap_us, timeout_s=timeout, halts_before=halts_before),
                deadline_of(timeout, 0.0) + 0.1,
            )
            vm.close()
            if t is not None:
                t.join(3.0)
                assert not t.is_alive(), "the vCPU thread outlived close()"


# --------------------------------------------------------------------------- experiment.run

WORKLOADS = st.one_of(
    st.builds(experiment.Spin),
    st.builds(
        experiment.SpinLock,
        kind=st.sampled_from(["tas", "ticket", "mcs"]),
        hold=st.one_of(st.integers(0, 100), ANY),
        think=st.integers(0, 100),
        iterations=st.one_of(st.integers(0, 50), ANY),
    ),
    st.builds(experiment.MsiPingPong, rounds=st.one_of(st.integers(2, 30), ANY), gap_us=SMALL_GAP_US),
    st.builds(experiment.IpiPingPong, rounds=st.one_of(st.integers(1, 30), ANY), gap_us=SMALL_GAP_US),
    st.builds(experiment.IdleTicks, hz=st.one_of(st.integers(1, 1000), ANY)),
    ODD,
)


VALID_WORKLOADS = st.one_of(
    st.just((experiment.Spin(), 2)),
    st.just((experiment.SpinLock(kind="ticket", hold=20, think=20), 2)),
    st.just((experiment.MsiPingPong(rounds=10, gap_us=50), 1)),
    st.just((experiment.IpiPingPong(rounds=10, gap_us=50), 2)),
    st.just((experiment.IdleTicks(hz=250), 1)),
)


def _mostly_valid(valid: Any, other: Any) -> Any:
    """Valid values most of the time, so that whole runs happen too."""
    return st.one_of(valid, valid, valid, other)


@given(
    wv=st.one_of(VALID_WORKLOADS, st.tuples(WORKLOADS, st.one_of(st.integers(1, 3), ANY))),
    duration=_mostly_valid(st.floats(0.01, 0.15), TIMEOUT),
    sample_every=_mostly_valid(st.one_of(st.none(), st.floats(0.001, 0.1)), ANY),
    poll_every=_mostly_valid(st.just(0.05), TIMEOUT),
    vms=_mostly_valid(st.integers(1, 2), st.one_of(st.integers(-1, 0), ODD)),
    pcpus=_mostly_valid(st.sampled_from([None, [0], [0, 1]]), ANY),
)
def prop_experiment(wv: Any, duration: Any, sample_every: Any, poll_every: Any, vms: Any, pcpus: Any) -> None:
    workload, vcpus = wv
    with NoLeak():
        dl = deadline_of(duration) + experiment.GRACE_S + 2.0
        call(
            lambda: experiment.run(
                workload,
                vcpus=vcpus,
                duration_s=duration,
                sample_every_s=sample_every,
                poll_every_s=poll_every,
                vms=vms,
                pcpus=pcpus,
                host=HOST,
            ),
            dl,
        )


# --------------------------------------------------------------------------- calibrate (validation only)

CAL_VALID: dict[str, Any] = dict(
    gaps_us=[50],
    max_poll_ns=[0],
    rounds=20,
    min_cell_s=0,
    pcpu=1,
    sender_cpu=0,
    seed=0,
    background_busy_ns=10_000_000,
    sim_replicas=1,
    deadline_s=5.0,
    plot=None,
)
CAL_BAD: dict[str, Any] = {
    "gaps_us": st.one_of(
        st.just([]), st.lists(st.sampled_from([-1.0, math.nan, math.inf, 1e9]), min_size=1, max_size=2)
    ),
    "max_poll_ns": st.one_of(st.just([]), st.lists(st.sampled_from([-1, 2**32, 1.5]), min_size=1, max_size=2)),
    "rounds": st.sampled_from([0, 19, 100_001, 1.5, None, "20"]),
    "min_cell_s": st.sampled_from([-1, 11, math.nan, "0"]),
    "pcpu": st.sampled_from([-1, 2**20, "1", 0]),
    "seed": st.sampled_from([-1, 2**64, 1.5, "0"]),
    "background_busy_ns": st.sampled_from([0, -5, 10**14, 1.5]),
    "sim_replicas": st.sampled_from([0, 1001, True]),
    "deadline_s": st.sampled_from([0.0, -1.0, math.nan, math.inf, 0.01]),
    "plot": st.sampled_from(["/proc/x.png", "/nonexistent/dir/x.png", 5]),
}


@given(data=st.data(), which=st.lists(st.sampled_from(sorted(CAL_BAD)), min_size=1, max_size=3, unique=True))
def prop_calibrate_validates_first(data: Any, which: list[str]) -> None:
    kw = dict(CAL_VALID)
    for k in which:
        kw[k] = data.draw(CAL_BAD[k], label=k)
    with NoLeak():
        t0 = time.monotonic()
        try:
            calibrate.halt_poll(**kw)
        except Exception:
            pass
        else:
            raise AssertionError(f"calibrate.halt_poll accepted {which}: {[kw[k] for k in which]}")
        assert time.monotonic() - t0 < 0.5, "validation must come before any measurement"


# --------------------------------------------------------------------------- the halt-poll model


@given(
    policy=st.sampled_from(["off", "fixed", "dynamic-v4", "block-time", "bogus"]),
    halt_poll_ns=st.one_of(st.integers(0, 1_000_000), ANY),
    gap_ns=st.one_of(st.integers(1, 1_000_000), ANY),
    rounds=st.one_of(st.integers(1, 300), ANY),
    duration_ns=st.one_of(st.just(0), st.integers(1, 20_000_000), ANY),
    busy=st.one_of(st.none(), st.integers(1, 100_000)),
    idle=st.integers(1, 100_000),
    hz=st.one_of(st.integers(1, 10_000), ANY),
    seed=st.one_of(st.integers(0, 2**64 - 1), ANY),
)
def prop_halt_poll_model(
    policy: str, halt_poll_ns: Any, gap_ns: Any, rounds: Any, duration_ns: Any, busy: Any, idle: Any, hz: Any, seed: Any
) -> None:
    def go() -> Any:
        sc = hp.Scenario(
            sim.HaltPoll(policy=policy, max_ns=halt_poll_ns),
            vcpus=(hp.Message(gap_ns=gap_ns), hp.Timer(hz=hz)),
            background=None if busy is None else hp.Background(busy_ns=busy, idle_ns=idle),
            rounds=rounds,
            duration_ns=duration_ns,
            seed=seed,
        )
        return hp.run(sc)

    with NoLeak():
        call(go, 20.0)


PROPS = [
    prop_host,
    prop_vm,
    prop_vcpu,
    prop_msi_ping,
    prop_experiment,
    prop_calibrate_validates_first,
    prop_halt_poll_model,
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--examples", type=int, default=int(os.environ.get("VCPULAB_PROPERTY_EXAMPLES", "10")))
    ap.add_argument("--only", default=None, help="run only the property with this name")
    ap.add_argument("--watchdog", type=float, default=600.0, help="kill the process (a hang) after this many s")
    args = ap.parse_args()
    faulthandler.dump_traceback_later(args.watchdog, exit=True)
    # one-time, process-wide resources (polars' and the sampler's lazily opened
    # files and pools) are made here, so that the checks see only leaks
    experiment.run(experiment.Spin(), vcpus=1, pcpus=[0], duration_s=0.01, host=HOST)
    hp.run(hp.Scenario(rounds=10))
    for prop in PROPS:
        if args.only and prop.__name__ != args.only:
            continue
        n = args.examples if prop is not prop_experiment else max(3, args.examples // 3)
        t0 = time.monotonic()
        settings(
            max_examples=n, deadline=None, database=None, suppress_health_check=list(HealthCheck), print_blob=True
        )(prop)()
        print(f"{prop.__name__}: {n} examples in {time.monotonic() - t0:.1f} s", flush=True)
    print("outcomes of the calls:", dict(OUTCOMES.most_common()), flush=True)
    print("ALL PROPERTIES HOLD", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
