//! Kernel tracepoints of a run: scheduler and KVM events, per host CPU,
//! through `perf_event_open` (the `perf-event2` crate), decoded with the
//! kernel's own event format files.
//!
//! Rooms: `format.rs` (tracefs and the event format files), `events.rs` (the
//! decoded events and the decoder's state), `frames.rs` (events into the
//! Run's columns); the tracer itself (buffers, reader thread) is here.
//!
//! One ring buffer per traced CPU: the first event opened on a CPU owns it
//! (`perf_event2::Sampler`), every other tracepoint on that CPU writes into it
//! (`PERF_EVENT_IOC_SET_OUTPUT`). Each sample carries `PERF_SAMPLE_TID | TIME
//! | CPU | RAW`; its time is `CLOCK_MONOTONIC` (`attr.clockid`), so it lines up
//! with [`monotonic_ns`](crate::kvm::os::monotonic_ns) and the run's start. A reader thread drains the
//! buffers (woken by `poll` when a buffer is a quarter full, or every 50 ms)
//! and decodes each raw record with the field offsets, sizes and signedness
//! of `/sys/kernel/tracing/events/<system>/<event>/format`; the event is
//! recognised by its `common_type` field (the tracepoint's id). Nothing of
//! ftrace's global state is touched, so other tracers keep working.
//!
//! Memory is bounded twice: the kernel's ring buffer (`buffer_bytes` per CPU;
//! records that do not fit are counted by the kernel as lost) and the decoded
//! event list (`max_events`; further events are counted as dropped). Either
//! sets `truncated`. Dropping a [`Tracer`] stops the reader and closes every
//! perf fd, on every path (error, Ctrl-C, deadline).
//!
//! Which events, on which CPUs (see [`EVENTS`]):
//! * on the traced CPUs: `sched:sched_switch` and the KVM events;
//! * on every online CPU: `sched:sched_wakeup` whose `target_cpu` is traced
//!   (a wake-up is raised on the waker's CPU, which may be another one).
//!
//! KVM events are kept only for threads of one process (`kvm_pid`), so other
//! VMs running on the same CPUs do not fill the buffer.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use perf_event::events::Tracepoint;
use perf_event::{Builder, Clock, Counter, SampleFlag, Sampler};

use super::error::{Error, Result};
use super::os::monotonic_ns;

/// The tracepoints recorded, as (system, event, required). A missing optional
/// event (an older kernel) is skipped; a missing required one is an error.
pub const EVENTS: &[(&str, &str, bool)] = &[
    ("sched", "sched_switch", true),
    ("sched", "sched_wakeup", true),
    ("kvm", "kvm_exit", true),
    ("kvm", "kvm_entry", true),
    ("kvm", "kvm_vcpu_wakeup", true),
    ("kvm", "kvm_halt_poll_ns", false),
    ("kvm", "kvm_userspace_exit", false),
    ("kvm", "kvm_msi_set_irq", false),
    ("kvm", "kvm_apic_ipi", false),
    ("kvm", "kvm_fpu", false),
];

/// The tracepoints a trace with [`TraceOptions::run_loop_exits`] leaves out:
/// its vCPUs' run loop times the exits to user space instead (`run_loop.rs`).
pub const RUN_LOOP_REPLACES: &[&str] = &["kvm_userspace_exit", "kvm_fpu"];

/// The kernel-side filter of a tracepoint's records, where the frames read
/// only some of them: `kvm_fpu` fires twice per `KVM_RUN` (the guest FPU's
/// load on the way in, its put on the way out) and only the load ends an
/// exit's row (`Frames::build`). Filtered in the kernel, a put is not written
/// to the ring buffer nor decoded: on this host's IO-exit loop that took the
/// traced exit's extra cost from 3.7 to 3.0 µs (docs/tracing.md, "Costs and bounds").
fn filter_of(event: &str) -> Option<&'static str> {
    (event == "kvm_fpu").then_some("load != 0")
}

/// Sets a tracepoint filter on `counter` (`PERF_EVENT_IOC_SET_FILTER`). A
/// kernel that refuses it (no such field, no event filters) records every
/// record instead, and the decoder skips the ones the filter would have
/// dropped, so the trace is the same, only dearer.
fn set_filter(counter: &Counter, filter: &str) {
    let Ok(c) = std::ffi::CString::new(filter) else { return };
    // SAFETY: `counter` is an open perf event fd; the kernel copies the
    // NUL-terminated string, which outlives the call, and does not keep the pointer.
    let _ = unsafe { perf_event_open_sys::ioctls::SET_FILTER(counter.as_raw_fd(), c.as_ptr() as *mut libc::c_char) };
}

/// Default cap on decoded events: 2 M events of 40 bytes (80 MB).
pub const DEFAULT_MAX_EVENTS: usize = 2_000_000;
/// Default kernel ring buffer per traced CPU, bytes (a power of two).
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;

mod events;
mod format;
mod frames;
mod run_loop;
#[cfg(test)]
mod tests;

pub use events::*;
pub use format::*;
pub use frames::*;
pub use run_loop::*;

/// One CPU's ring buffer and the other events writing into it.
struct CpuBuffer {
    sampler: Sampler,
    followers: Vec<Counter>,
}

/// A running trace. [`Tracer::stop`] returns what it recorded; dropping it
/// without `stop` stops it too (the reader thread ends, every fd is closed).
pub struct Tracer {
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Collected>>,
    cpus: Vec<usize>,
    /// The rows of the vCPUs that time their own exits ([`TraceOptions::run_loop_exits`]).
    exit_log: Option<Arc<ExitLog>>,
    max_events: usize,
}

impl Tracer {
    /// Starts tracing `cpus` (scheduler and KVM events) and the wake-ups aimed at them.
    pub fn start(cpus: &[usize], opts: TraceOptions) -> Result<Tracer> {
        let online = online_cpus();
        if cpus.is_empty() {
            return Err(Error::InvalidArgument("tracing needs at least one host CPU".into()));
        }
        if let Some(c) = cpus.iter().find(|c| !online.contains(c)) {
            return Err(Error::InvalidArgument(format!("host CPU {c} is not online (online CPUs: {online:?})")));
        }
        if opts.max_events == 0 {
            return Err(Error::InvalidArgument("max_events must be at least 1".into()));
        }
        if !(4096..=(1 << 30)).contains(&opts.buffer_bytes) {
            return Err(Error::InvalidArgument(format!(
                "buffer_bytes must be between 4 KiB and 1 GiB, got {}",
                opts.buffer_bytes
            )));
        }
        let events = events_dir()?;
        let mut tracepoints = Vec::new();
        // (id, on every online CPU, the kernel-side filter)
        let mut ids: Vec<(u64, bool, Option<&'static str>)> = Vec::new();
        let mut common_type = None;
        let mut exit_names = ExitNames::default();
        let mut uexit_names = HashMap::new();
        for &(sys, ev, required) in EVENTS {
            if sys == "kvm" && !opts.kvm_events {
                continue;
            }
            if opts.run_loop_exits && RUN_LOOP_REPLACES.contains(&ev) {
                continue; // the run loop times these exits (run_loop.rs)
            }
            let fmt = match EventFormat::load(&events, sys, ev) {
                Ok(f) => f,
                Err(e) if required => return Err(e),
                Err(_) => continue,
            };
            if common_type.is_none() {
                common_type = Some(fmt.field("common_type")?);
            }
            if ev == "kvm_exit" {
                exit_names = ExitNames::from_format(&fmt);
            }
            if ev == "kvm_userspace_exit" {
                uexit_names =
                    fmt.symbol_tables().into_iter().next().map(|(_, t)| t.into_iter().collect()).unwrap_or_default();
            }
            let dec = Decoder::new(&fmt)?;
            ids.push((fmt.id, ev == "sched_wakeup", filter_of(ev)));
            tracepoints.push(Recorded { id: fmt.id, name: format!("{sys}:{ev}"), decoder: dec, seen: 0 });
        }
        let common_type = common_type.ok_or_else(|| Error::TraceUnavailable("no tracepoint format found".into()))?;
        let max_cpu = online.iter().copied().max().unwrap_or(0);
        let mut traced = vec![false; max_cpu + 1];
        for &c in cpus {
            traced[c] = true;
        }
        let mut buffers = Vec::new();
        for &cpu in &online {
            let mut leader: Option<Sampler> = None;
            let mut followers = Vec::new();
            for &(id, everywhere, filter) in &ids {
                if !(traced[cpu] || everywhere) {
                    continue;
                }
                let mut b = Builder::new(Tracepoint::with_id(id));
                b.one_cpu(cpu)
                    .any_pid()
                    .include_kernel()
                    .sample_period(1)
                    .sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::CPU | SampleFlag::RAW)
                    .clockid(Clock::MONOTONIC)
                    .enabled(false);
                if leader.is_none() {
                    b.wakeup_watermark(opts.buffer_bytes.next_power_of_two() / 4);
                }
                let counter = b.build().map_err(|e| match e.raw_os_error() {
                    Some(libc::EACCES) | Some(libc::EPERM) => Error::TraceUnavailable(format!(
                        "perf_event_open refused a tracepoint ({e}): tracing needs root, or CAP_PERFMON and \
                         kernel.perf_event_paranoid <= 1 with read access to tracefs"
                    )),
                    _ => Error::Ioctl { call: "perf_event_open (tracepoint)", source: e },
                })?;
                if let Some(f) = filter {
                    set_filter(&counter, f);
                }
                match &leader {
                    None => {
                        let s = counter
                            .sampled(opts.buffer_bytes)
                            .map_err(|e| Error::Ioctl { call: "mmap (perf ring buffer)", source: e })?;
                        leader = Some(s);
                    }
                    Some(l) => {
                        // SAFETY: both are open perf event fds on the same CPU; SET_OUTPUT only
                        // redirects this event's records into the leader's ring buffer.
                        let rc = unsafe { perf_event_open_sys::ioctls::SET_OUTPUT(counter.as_raw_fd(), l.as_raw_fd()) };
                        if rc != 0 {
                            return Err(Error::last_os("PERF_EVENT_IOC_SET_OUTPUT"));
                        }
                        followers.push(counter);
                    }
                }
            }
            if let Some(sampler) = leader {
                buffers.push(CpuBuffer { sampler, followers });
            }
        }
        let start_ns = monotonic_ns();
        for b in &mut buffers {
            for f in &mut b.followers {
                f.enable().map_err(|e| Error::Ioctl { call: "PERF_EVENT_IOC_ENABLE", source: e })?;
            }
            b.sampler.enable().map_err(|e| Error::Ioctl { call: "PERF_EVENT_IOC_ENABLE", source: e })?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let dec = Decoding {
            tracepoints,
            common_type,
            exit_names,
            uexit_names,
            reason_index: HashMap::new(),
            comm_index: HashMap::new(),
            traced,
            opts,
            out: Collected { cpus: cpus.to_vec(), start_ns, kvm_events: opts.kvm_events, ..Default::default() },
        };
        let flag = stop.clone();
        // the reader runs on CPUs the trace does not watch, where there are such CPUs
        let elsewhere: Vec<usize> = super::os::allowed_cpus().into_iter().filter(|c| !cpus.contains(c)).collect();
        let reader = std::thread::Builder::new()
            .name("vcpulab-trace".into())
            .spawn(move || {
                let _ = super::os::pin_current_thread(&elsewhere);
                reader(buffers, dec, flag)
            })
            .map_err(|e| Error::Ioctl { call: "spawn trace reader thread", source: e })?;
        let exit_log = (opts.kvm_events && opts.run_loop_exits).then(|| Arc::new(ExitLog::new(opts.max_events)));
        Ok(Tracer { stop, reader: Some(reader), cpus: cpus.to_vec(), exit_log, max_events: opts.max_events })
    }

    /// The log the vCPUs of this process time their exits into
    /// ([`crate::kvm::Vcpu::time_exits`]); None unless the trace was started
    /// with [`TraceOptions::run_loop_exits`] (and the KVM events).
    pub fn exit_log(&self) -> Option<Arc<ExitLog>> {
        self.exit_log.clone()
    }

    /// The traced CPUs.
    pub fn cpus(&self) -> &[usize] {
        &self.cpus
    }

    /// Stops recording, drains every buffer and returns the events.
    pub fn stop(mut self) -> Result<Collected> {
        self.stop.store(true, Ordering::Release);
        let h = self.reader.take().expect("a tracer is stopped once");
        let mut c = h
            .join()
            .map_err(|_| Error::UnexpectedExit("the trace reader thread panicked (a bug in vcpulab)".into()))?;
        if let Some(log) = self.exit_log.take() {
            c.add_run_loop(log.close(), self.max_events);
        }
        Ok(c)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let Some(log) = self.exit_log.take() {
            log.close(); // the vCPUs stop timing their exits
        }
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.reader.take() {
            let _ = h.join();
        }
    }
}

fn drain(buf: &mut Sampler, dec: &mut Decoding) {
    use perf_event::data::Record as R;
    while let Some(rec) = buf.next_record() {
        match rec.parse_record() {
            Ok(R::Sample(s)) => {
                if let (Some(t), Some(cpu), Some(tid), Some(raw)) = (s.time(), s.cpu(), s.tid(), s.raw()) {
                    dec.sample(t, cpu, s.pid().unwrap_or(0), tid, raw);
                } else {
                    dec.out.malformed += 1;
                }
            }
            Ok(R::Lost(l)) => dec.out.lost += l.lost,
            Ok(_) => {}
            Err(_) => dec.out.malformed += 1,
        }
    }
}

fn reader(mut buffers: Vec<CpuBuffer>, mut dec: Decoding, stop: Arc<AtomicBool>) -> Collected {
    let mut fds: Vec<libc::pollfd> =
        buffers.iter().map(|b| libc::pollfd { fd: b.sampler.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    loop {
        if stop.load(Ordering::Acquire) {
            break;
        }
        for b in &mut buffers {
            drain(&mut b.sampler, &mut dec);
        }
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds whose fds stay open (owned by `buffers`).
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
    }
    for b in &mut buffers {
        let _ = b.sampler.disable();
        for f in &mut b.followers {
            let _ = f.disable();
        }
    }
    // after every event is disabled: no record can carry a later time (the
    // window was stamped before the disables, and a switch between the stamp
    // and a disable fell outside it: 1 failure in a CI run)
    dec.out.end_ns = monotonic_ns();
    for b in &mut buffers {
        drain(&mut b.sampler, &mut dec);
    }
    dec.out.events.sort_by_key(|e| e.time_ns);
    for tp in &dec.tracepoints {
        if tp.seen > 0 {
            dec.out.counts.insert(tp.name.clone(), tp.seen);
        }
    }
    dec.out
    // `buffers` drops here: every ring buffer is unmapped and every perf fd closed
}
