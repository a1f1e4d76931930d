"""The 2015 "KVM: Dynamic Halt-Polling" series as vcpulab reconstructs it
(v3, v4) next to the merged block-time rule: the window sequences the review
describes, and one vocabulary of policy names for the engine and the model."""

from __future__ import annotations

import warnings

import pytest

from vcpulab import sim
from vcpulab.sim import halt_poll as hp

US, MS = 1_000, 1_000_000
# an idle guest ticking at 250 Hz: each halt lasts the tick period less the
# tick's own work (~100 µs), and the timer interrupt can be caught by a poll
IDLE_250HZ = [(4 * MS - 100 * US, True)] * 12
# a message-passing guest: the next message arrives 50 µs into each halt
MESSAGES = [(50 * US, True)] * 12


def test_v3_oscillates_on_an_idle_guest_as_the_review_describes() -> None:
    # the 4.3-era shrink (0: reset) and a maximum that lets the window reach 4 ms
    p = sim.HaltPoll(policy="dynamic-v3", max_ns=8 * MS, grow=2, grow_start_ns=10 * US, shrink=0)
    w = hp.windows(p, IDLE_250HZ)
    assert w[:7] == [0, 500 * US, 1 * MS, 2 * MS, 4 * MS, 0, 500 * US]
    # and forever after, with period 5
    assert w[5:10] == w[:5] and w[10:] == w[:2]


def test_v4_stays_at_the_maximum_for_a_message_passing_guest() -> None:
    p = sim.HaltPoll(policy="dynamic-v4", max_ns=200 * US, grow=2, grow_start_ns=10 * US, shrink=0)
    assert hp.windows(p, MESSAGES) == [200 * US] * 12
    # it even stays there on the idle 250 Hz guest: no halt is "idle" (> 10 ms)
    assert set(hp.windows(p, IDLE_250HZ)) == {200 * US}
    # started at 0 it never polls, so it never sees an interrupt while polling
    assert set(hp.windows(sim.HaltPoll(policy="dynamic-v4", max_ns=200 * US, v4_start_ns=0), MESSAGES)) == {0}


def test_block_time_stays_at_zero_for_long_halts_and_grows_for_short_ones() -> None:
    p = sim.HaltPoll(policy="block-time", max_ns=200 * US, grow=2, grow_start_ns=10 * US, shrink=0)
    assert set(hp.windows(p, IDLE_250HZ)) == {0}
    w = hp.windows(p, MESSAGES)
    # 0 → 10 µs → 20 µs → 40 µs → 80 µs: the first window that covers the 50 µs halt stays
    assert w[:6] == [0, 10 * US, 20 * US, 40 * US, 80 * US, 80 * US]
    assert set(w[4:]) == {80 * US}


def test_v3_message_passing_halves_after_each_caught_interrupt() -> None:
    # shrink 2 (today's default): a caught interrupt halves the window, a
    # missed one doubles it: it hovers around the message gap
    p = sim.HaltPoll(policy="dynamic-v3", max_ns=200 * US, grow=2, grow_start_ns=10 * US, shrink=2)
    w = hp.windows(p, MESSAGES)
    assert w[0] == 0 and w[1] == 200 * US  # 500 µs clamped to the maximum at the next halt
    assert all(w[i] != w[i + 1] for i in range(1, 11))


def test_one_vocabulary_and_old_names_are_deprecated() -> None:
    assert hp.POLICIES == sim._config.HALT_POLL_POLICIES
    for name in hp.POLICIES:
        assert sim.HaltPoll(policy=name).policy == name
    # the old names are Rust's serde aliases, read from the schema: Python takes what Rust takes
    assert sim._config.HALT_POLL_OLD_NAMES == {"dynamic": "block-time", "dynamic_v4": "dynamic-v4", "v4": "dynamic-v4"}
    for old, new in sim._config.HALT_POLL_OLD_NAMES.items():
        with pytest.warns(DeprecationWarning, match=f"use '{new}'"):
            assert sim.HaltPoll(policy=old).policy == new
    with pytest.raises(ValueError, match="HaltPoll.policy must be one of 'off', 'fixed', 'dynamic-v3'"):
        sim.HaltPoll(policy="v5")


def test_params_is_a_deprecated_alias_of_the_one_halt_poll_type(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the calibration model and the engine share sim.HaltPoll; the old class builds one, with its names
    with pytest.warns(DeprecationWarning, match="use vcpulab.sim.HaltPoll"):
        p = hp.Params(policy="dynamic-v3", halt_poll_ns=8 * MS, grow=3, grow_start=20 * US, shrink=0, vm_max_ns=MS)
    assert p == sim.HaltPoll(policy="dynamic-v3", max_ns=8 * MS, grow=3, grow_start_ns=20 * US, shrink=0, vm_max_ns=MS)
    assert p.effective_max_ns == MS
    with pytest.warns(DeprecationWarning):
        assert hp.Params().policy == "block-time"  # the old default policy
    # module parameters left None are the host's (HaltPoll.from_host), else the kernel's defaults
    (tmp_path / "halt_poll_ns").write_text("123456\n")
    h = sim.HaltPoll.from_host(sysfs=str(tmp_path), policy="fixed")
    assert (h.max_ns, h.grow, h.grow_start_ns, h.shrink) == (123456, 2, 10_000, 2)
    assert sim.HaltPoll.from_host(sysfs=str(tmp_path), max_ns=7).max_ns == 7
    # one config type: a calibration-model scenario takes the engine's config
    sc = hp.Scenario(sim.HaltPoll(policy="block-time", vm_max_ns=50_000), vcpus=(hp.Message(20_000),), rounds=50)
    assert hp.run(sc).stats["halt_exits"][0] > 0
    # a config saved with an old name loads with the new one, the same run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = sim.Config(vms=(sim.Vm(halt_poll=sim.HaltPoll(policy="dynamic")),), duration_ns=2 * MS)
    new = sim.Config(vms=(sim.Vm(halt_poll=sim.HaltPoll(policy="block-time")),), duration_ns=2 * MS)
    assert old == new and old.to_json() == new.to_json()


def test_engine_runs_v3_with_the_shared_state_machine() -> None:
    wl = sim.Workload(name="ticks", phases=(sim.Compute(100 * US), sim.Sleep(3_900 * US)))
    cfg = sim.Config(
        host=sim.Host(n_pcpus=2),
        vms=(sim.Vm(vcpus=2, workload=wl, halt_poll=sim.HaltPoll(policy="dynamic-v3", max_ns=8 * MS, shrink=0)),),
        duration_ns=200 * MS,
        seed=1,
    )
    v = sim.run(cfg).vcpus
    # polls happen, some catch the timer, and the window stays within the v3 cycle
    assert v["halt_attempted_poll"].sum() > 0 and v["halt_successful_poll"].sum() > 0
    assert set(v["halt_poll_window_ns"].to_list()) <= {0, 500 * US, 1 * MS, 2 * MS, 4 * MS, 8 * MS}
