//! What `benches/efficiency.rs` measures with: one run of a `ferromq perf` consumer and
//! producer against a broker process, measured from outside ([`Runner::run`], giving
//! [`RunFigures`]), and its parts: the kernel's counters of a process ([`ProcessCounters`]:
//! CPU time and read/write system calls, from `/proc`; [`ThreadTimes`]), Apache ActiveMQ
//! as a process of its own ([`ActivemqProcess`], started by `../shared/peers/activemq/start.sh`),
//! a `ferromq perf` client as a child process whose CPU time is read once it has exited
//! ([`PerfClient`]), the moment a queue has its consumers ([`ConsumerAdvisories`]), and the
//! loopback round trip ([`loopback_round_trip`]).
//!
//! Both brokers are measured from outside, the same way: the Java broker's threads and
//! ferromq's are all in their process's `/proc/PID/stat`, so neither needs to report on itself.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context};
use client::load::perf::cpu::{parse_proc_stat, parse_process_stat};
use client::openwire::{Consumer, Destination, OpenWireClient, OpenWireOptions, SubscribeOptions};

use crate::Latencies;

/// How often a child's or a broker's `/proc` entry is looked at while waiting for it.
pub const POLL: Duration = Duration::from_millis(10);

/// The clock ticks per second of `/proc`'s CPU times (`getconf CLK_TCK`; 100 on Linux, used
/// when `getconf` cannot say).
pub fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .filter(|ticks| *ticks > 0)
        .unwrap_or(100)
}

/// The calling thread's time on a CPU so far, user and system (`/proc/thread-self/schedstat`,
/// in nanoseconds: a probe of a second spends a few clock ticks of `stat`, too coarse to divide).
pub fn thread_cpu_time() -> anyhow::Result<Duration> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat")
        .context("reading /proc/thread-self/schedstat")?;
    let nanos = schedstat
        .split_whitespace()
        .next()
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| anyhow!("no CPU time in /proc/thread-self/schedstat: {schedstat:?}"))?;
    Ok(Duration::from_nanos(nanos))
}

/// A process's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessCounters {
    /// User + system time of every thread, living or gone, in clock ticks (`/proc/PID/stat`
    /// fields 14 and 15).
    pub cpu_ticks: u64,
    /// `syscr + syscw` of `/proc/PID/io`, `None` where the file cannot be read (another
    /// user's process). These count the read and write family only (read, pread, readv,
    /// write, pwrite, writev, sendfile...), not send/recv on sockets, epoll or futex.
    pub read_write_syscalls: Option<u64>,
}

impl ProcessCounters {
    pub fn read(pid: u32) -> anyhow::Result<ProcessCounters> {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let cpu_ticks = parse_process_stat(&stat).with_context(|| format!("parsing {path}"))?;
        let read_write_syscalls = std::fs::read_to_string(format!("/proc/{pid}/io"))
            .ok()
            .and_then(|io| parse_io_syscalls(&io));
        Ok(ProcessCounters { cpu_ticks, read_write_syscalls })
    }
}

/// Each thread's CPU time at one moment: `/proc/PID/task/TID/stat`, by thread id, with the
/// thread's name (`C2 CompilerThre`, `GC Thread#0`, `tokio-runtime-w`...).
#[derive(Debug, Clone, Default)]
pub struct ThreadTimes(HashMap<u32, (String, u64)>);

impl ThreadTimes {
    /// The threads living now; one that ends meanwhile is left out.
    pub fn read(pid: u32) -> ThreadTimes {
        let mut threads = HashMap::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return ThreadTimes(threads);
        };
        for task in tasks.flatten() {
            let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
            let name = stat
                .split_once('(')
                .and_then(|(_, rest)| rest.rsplit_once(')'))
                .map_or(String::new(), |(name, _)| name.to_owned());
            if let Ok(ticks) = parse_process_stat(&stat) {
                threads.insert(tid, (name, ticks));
            }
        }
        ThreadTimes(threads)
    }

    /// The ticks that threads whose name `matches` spent from `before` to `self` (a thread
    /// started in between counts from zero; one that ended in between is missed, so this is
    /// a lower bound).
    pub fn since(&self, before: &ThreadTimes, matches: impl Fn(&str) -> bool) -> u64 {
        self.0
            .iter()
            .filter(|(_, (name, _))| matches(name))
            .map(|(tid, (_, ticks))| {
                let earlier = before.0.get(tid).map_or(0, |(_, ticks)| *ticks);
                ticks.saturating_sub(earlier)
            })
            .sum()
    }
}

/// The JVM's own threads under this name: the JIT compilers, or the garbage collector's
/// threads with the VM thread (safepoints, mostly collections).
pub fn is_jit_thread(name: &str) -> bool {
    name.starts_with("C1 Compiler") || name.starts_with("C2 Compiler")
}

/// See [`is_jit_thread`].
pub fn is_gc_thread(name: &str) -> bool {
    ["GC Thread", "G1 ", "VM Thread"].iter().any(|prefix| name.starts_with(prefix))
}

/// The machine's busy time (every CPU's user, nice, system, irq, softirq and steal) since
/// boot, in clock ticks, from `/proc/stat`.
pub fn machine_busy_ticks() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    Ok(parse_proc_stat(&text).context("parsing /proc/stat")?.busy())
}

/// Waits until each of `pids` has used less than `quiet` of a core over one `window`, for
/// at most `within`: what the previous run left a broker to do (a JVM compiling, a store
/// cleaning up) then stays out of the next run's figures. Returns the busiest process's
/// cores over the last window (below `quiet` if they settled).
pub fn settle(
    pids: &[u32],
    window: Duration,
    quiet: f64,
    within: Duration,
    ticks_per_second: u64,
) -> anyhow::Result<f64> {
    let deadline = Instant::now() + within;
    loop {
        let before: Vec<ProcessCounters> =
            pids.iter().map(|pid| ProcessCounters::read(*pid)).collect::<Result<_, _>>()?;
        let started = Instant::now();
        std::thread::sleep(window);
        let elapsed = started.elapsed().as_secs_f64();
        let mut busiest = 0.0f64;
        for (pid, before) in pids.iter().zip(before) {
            let ticks = ProcessCounters::read(*pid)?.cpu_ticks.saturating_sub(before.cpu_ticks);
            busiest = busiest.max(ticks as f64 / ticks_per_second as f64 / elapsed);
        }
        if busiest < quiet || Instant::now() >= deadline {
            return Ok(busiest);
        }
    }
}

/// The type of the file system holding `dir` (`ext4`, `xfs`, `tmpfs`...), from the longest
/// mount point of `/proc/self/mounts` above it.
pub fn file_system_type(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            // Spaces in mount points are written as \040.
            let point = PathBuf::from(point.replace("\\040", " "));
            dir.starts_with(&point).then(|| (point.as_os_str().len(), kind.to_owned()))
        })
        .max_by_key(|(length, _)| *length)
        .map(|(_, kind)| kind)
}

/// `syscr + syscw` of a `/proc/PID/io` text.
fn parse_io_syscalls(text: &str) -> Option<u64> {
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
    };
    Some(field("syscr:")? + field("syscw:")?)
}

/// The state letter of a `/proc/PID/stat` text (field 3: `R`, `S`, `Z`...).
fn process_state(stat: &str) -> Option<char> {
    let end = stat.rfind(')')?;
    stat[end + 1..].trim_start().chars().next()
}

/// Whether `pid` has ended: no `/proc` entry, or a zombie (dead, not yet reaped; the parent
/// of a Java broker started with `setsid` is not ours to wait for).
fn has_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => matches!(process_state(&stat), Some('Z' | 'X')),
        Err(_) => true,
    }
}

/// Sends `signal` (`TERM`, `KILL`) to `target` (a pid, or `-PGID` for a process group) with
/// the system's `kill` (no unsafe `libc::kill` here); what it says is ignored, since the
/// target may already be gone.
fn signal(signal: &str, target: &str) {
    let _ = Command::new("kill")
        .args([format!("-{signal}"), "--".to_owned(), target.to_owned()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The file with ActiveMQ's classes, present once Debian's `activemq` package is installed.
pub const ACTIVEMQ_JAR: &str = "/usr/share/activemq/bin/activemq.jar";

/// Apache ActiveMQ Classic (Debian's package) on loopback, started by
/// `../shared/peers/activemq/start.sh` on a directory of its own (KahaDB under `DIR/data`),
/// with an OpenWire, a STOMP and an MQTT connector on ports chosen free; stopped on drop.
pub struct ActivemqProcess {
    pid: u32,
    pub openwire: SocketAddr,
    dir: PathBuf,
    /// Set when started from the repository's configuration ([`ActivemqProcess::start_own`]),
    /// which stops the broker when dropped.
    own: Option<::tests::ActiveMq>,
}

impl ActivemqProcess {
    /// Whether the package is installed (`start.sh` would install it otherwise, which a
    /// bench should not do behind anyone's back).
    pub fn installed() -> bool {
        Path::new(ACTIVEMQ_JAR).is_file()
    }

    /// Starts the broker on `dir` with `script` (start.sh); returns once its OpenWire port
    /// accepts connections (start.sh waits for that, up to a minute).
    pub fn start(script: &Path, dir: &Path) -> anyhow::Result<ActivemqProcess> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir = dir.canonicalize().with_context(|| format!("resolving {}", dir.display()))?;
        let [openwire, stomp, mqtt] = free_ports()?;
        let out = Command::new(script)
            .arg(&dir)
            .args([openwire, stomp, mqtt].map(|port| port.to_string()))
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .with_context(|| format!("running {}", script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let log = std::fs::read_to_string(dir.join("broker.log")).unwrap_or_default();
            bail!(
                "{} exited with {}: {}\n{log}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let printed: u32 = stdout
            .lines()
            .last()
            .and_then(|line| line.trim().parse().ok())
            .with_context(|| format!("{} printed no pid: {stdout:?}", script.display()))?;
        let pid = java_pid(printed, &dir).inspect_err(|_| {
            // Whatever it is, it was started for this bench.
            signal("TERM", &format!("-{printed}"));
            signal("TERM", &printed.to_string());
        })?;
        Ok(ActivemqProcess {
            pid,
            openwire: SocketAddr::from(([127, 0, 0, 1], openwire)),
            dir,
            own: None,
        })
    }

    /// Starts the broker as the integration tests do (`tests::ActiveMq`, the repository's
    /// `tests/activemq/activemq.xml` with KahaDB), for machines without `../shared/peers`;
    /// `None` when the package is not installed.
    pub fn start_own() -> anyhow::Result<Option<ActivemqProcess>> {
        let Some(broker) = ::tests::ActiveMq::start_persistent()? else { return Ok(None) };
        let pid = broker.pid().context("ActiveMQ has no process")?;
        Ok(Some(ActivemqProcess {
            pid,
            openwire: broker.addr(),
            dir: PathBuf::new(),
            own: Some(broker),
        }))
    }

    /// The Java process's id (its threads are all in `/proc/PID/stat`).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ActivemqProcess {
    /// TERM to the process and to its process group (`setsid` made it the group's leader),
    /// KILL after 20 s.
    fn drop(&mut self) {
        if self.own.take().is_some() {
            return;
        }
        let (pid, group) = (self.pid.to_string(), format!("-{}", self.pid));
        signal("TERM", &pid);
        signal("TERM", &group);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !has_ended(self.pid) && Instant::now() < deadline {
            std::thread::sleep(POLL * 5);
        }
        if !has_ended(self.pid) {
            signal("KILL", &group);
            signal("KILL", &pid);
        }
    }
}

/// Three ports nobody listens on, held at once so that they differ (as
/// `scripts/compare-activemq` picks them: bind port 0, read it back, let go). ActiveMQ binds
/// them itself moments later; start.sh fails if one was taken in between.
fn free_ports() -> anyhow::Result<[u16; 3]> {
    let listeners = [(); 3].map(|_| TcpListener::bind("127.0.0.1:0"));
    let mut ports = [0u16; 3];
    for (port, listener) in ports.iter_mut().zip(listeners) {
        *port = listener.context("binding 127.0.0.1:0")?.local_addr()?.port();
    }
    Ok(ports)
}

/// The Java process start.sh started: the pid it printed (`setsid` execs java when it need
/// not fork), or else the java process whose command line names `dir` as ActiveMQ's base.
fn java_pid(printed: u32, dir: &Path) -> anyhow::Result<u32> {
    let comm = std::fs::read_to_string(format!("/proc/{printed}/comm")).unwrap_or_default();
    if comm.trim() == "java" {
        return Ok(printed);
    }
    let base = format!("-Dactivemq.base={}", dir.display());
    let entries = std::fs::read_dir("/proc").context("listing /proc")?;
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if cmdline.split(|b| *b == 0).any(|arg| arg == base.as_bytes()) {
            return Ok(pid);
        }
    }
    bail!("start.sh printed pid {printed} ({:?}), and no java process has {base}", comm.trim())
}

/// A `ferromq perf producer|consumer` child process, stdout and stderr in files, killed on
/// drop if still running.
///
/// Its CPU time is read from `/proc/PID/stat` after it has exited and before it is reaped:
/// a zombie's entry still holds the whole process's user and system time, every thread's
/// included, so the figure is exact without wrapping the client in `/usr/bin/time` (not
/// installed everywhere) or having it report on itself. Hence [`PerfClient::poll`] looks at
/// the state letter instead of calling `try_wait`, which would reap it.
pub struct PerfClient {
    child: Child,
    name: String,
    stdout: PathBuf,
    stderr: PathBuf,
    finished: Option<Finished>,
}

/// What a client left behind.
#[derive(Debug, Clone)]
pub struct Finished {
    pub status: ExitStatus,
    /// User + system time of the whole process.
    pub cpu: Duration,
    /// When it was seen to have exited.
    pub at: Instant,
}

impl PerfClient {
    /// Runs `binary perf ROLE ARGS...` with stdout and stderr in `dir/ROLE.out` and
    /// `dir/ROLE.err`.
    pub fn spawn(binary: &Path, role: &str, args: &[String], dir: &Path) -> anyhow::Result<Self> {
        let stdout = dir.join(format!("{role}.out"));
        let stderr = dir.join(format!("{role}.err"));
        let child = Command::new(binary)
            .args(["perf", role])
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .with_context(|| format!("starting {} perf {role}", binary.display()))?;
        Ok(PerfClient { child, name: role.to_owned(), stdout, stderr, finished: None })
    }

    /// `Some` once the process has exited: its CPU time read, then reaped.
    pub fn poll(&mut self, ticks_per_second: u64) -> anyhow::Result<Option<&Finished>> {
        if self.finished.is_none() {
            let pid = self.child.id();
            let path = format!("/proc/{pid}/stat");
            // Only this process reaps its child, so the entry is there until it does.
            let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
            // A zombie leader may still have threads on their way out; their time is in once
            // the leader is the only task left.
            let alone = std::fs::read_dir(format!("/proc/{pid}/task"))
                .map(|tasks| tasks.count() <= 1)
                .unwrap_or(true);
            if process_state(&stat) != Some('Z') || !alone {
                return Ok(None);
            }
            let ticks = parse_process_stat(&stat).with_context(|| format!("parsing {path}"))?;
            let at = Instant::now();
            let status = self.child.wait().with_context(|| format!("reaping {}", self.name))?;
            let cpu = Duration::from_secs_f64(ticks as f64 / ticks_per_second as f64);
            self.finished = Some(Finished { status, cpu, at });
        }
        Ok(self.finished.as_ref())
    }

    /// Kills the process (if it still runs) and reaps it.
    pub fn kill(&mut self) {
        if self.finished.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// What it printed on stdout.
    pub fn stdout(&self) -> anyhow::Result<String> {
        std::fs::read_to_string(&self.stdout)
            .with_context(|| format!("reading {}", self.stdout.display()))
    }

    /// The end of what it printed on stderr, for error messages.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for PerfClient {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long the consumers may take to subscribe.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(30);
/// Before each run (and each disk probe), every broker must use less than [`QUIET_CORES`]
/// of a core over [`QUIET_WINDOW`], waited for up to [`SETTLE_TIMEOUT`]: ActiveMQ's JVM
/// goes on compiling for seconds after it starts, and after a run.
pub const QUIET_WINDOW: Duration = Duration::from_millis(500);
pub const QUIET_CORES: f64 = 0.05;
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

/// A broker under measurement: its OpenWire connector and its process.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub openwire: SocketAddr,
    pub pid: u32,
    /// A Java process, whose compiler and collector threads [`RunFigures::jit_share`] and
    /// [`RunFigures::gc_share`] count.
    pub jvm: bool,
}

/// One run's figures.
#[derive(Debug, Clone, Copy)]
pub struct RunFigures {
    /// msgs/s as `scripts/compare-activemq` has it (the consumer's whole-run line).
    pub rate: f64,
    /// The consumer's and the producer's own whole-run seconds: a producer far quicker than
    /// its consumer left a backlog in the broker.
    pub consumer_seconds: f64,
    pub producer_seconds: f64,
    /// The broker's CPU time per message received.
    pub broker_us: f64,
    /// The producer's and the consumer's CPU time together per message received.
    pub client_us: f64,
    /// The broker's `syscr + syscw` per message received, where readable.
    pub syscalls: Option<f64>,
    /// CPU time over the run's wall time (consumer start to the last exit), in cores.
    pub broker_cores: f64,
    pub producer_cores: f64,
    pub consumer_cores: f64,
    /// The rest of the machine's busy time: the idle broker, the bench, anything else.
    pub other_cores: f64,
    /// The shares of the broker's CPU in the JVM's compiler threads, and in its collector
    /// and VM threads (0 for a broker that is not a JVM).
    pub jit_share: f64,
    pub gc_share: f64,
}

/// Runs `ferromq perf` consumer and producer systems against brokers and measures them.
pub struct Runner {
    /// The `ferromq` binary, the client of every broker.
    pub binary: PathBuf,
    pub ticks_per_second: u64,
    /// Serves the advisory watcher's connection while the runner waits on the clients.
    pub runtime: tokio::runtime::Runtime,
    /// Each run's outputs go in a directory named after its queue under this one.
    pub runs_dir: PathBuf,
    /// A run that takes longer fails (its clients are killed).
    pub run_timeout: Duration,
    /// Every broker's pid, all of which must be quiet before a run.
    pub pids: Vec<u32>,
}

impl Runner {
    pub fn seconds(&self, ticks: u64) -> f64 {
        ticks as f64 / self.ticks_per_second as f64
    }

    /// Waits for the brokers to go quiet ([`settle`]); `false`, with a line saying so, when
    /// one did not.
    pub fn settle(&self) -> anyhow::Result<bool> {
        let tps = self.ticks_per_second;
        let busiest = settle(&self.pids, QUIET_WINDOW, QUIET_CORES, SETTLE_TIMEOUT, tps)?;
        let quiet = busiest < QUIET_CORES;
        if !quiet {
            println!("a broker still used {busiest:.2} cores after {SETTLE_TIMEOUT:?}; going on");
        }
        Ok(quiet)
    }

    /// One run against `broker` on `queue`: `clients` consumers with `consumer_keys` (perf
    /// keys, space-separated), then as many producers of 1 KiB messages with
    /// `producer_keys`, as `scripts/compare-activemq`'s `run_one` starts them.
    pub fn run(
        &self,
        broker: &Target,
        clients: usize,
        producer_keys: &str,
        consumer_keys: &str,
        queue: &str,
    ) -> anyhow::Result<RunFigures> {
        let out = self.runs_dir.join(queue);
        std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
        let common = [
            format!("factory.brokerURL=tcp://{}", broker.openwire),
            format!("sysTest.numClients={clients}"),
            format!("sysTest.reportDir={}/", out.display()),
        ];
        let mut consumer_args = common.to_vec();
        consumer_args.push(format!("consumer.destName=queue://{queue}"));
        consumer_args.extend(consumer_keys.split_whitespace().map(str::to_owned));
        let mut producer_args = common.to_vec();
        producer_args.push(format!("producer.destName=queue://{queue}"));
        producer_args.push("producer.messageSize=1024".to_owned());
        producer_args.extend(producer_keys.split_whitespace().map(str::to_owned));

        // Subscribed before the first reading, so that only its advisories fall in the window.
        let mut advisories =
            self.runtime.block_on(ConsumerAdvisories::watch(broker.openwire, queue))?;
        let clients =
            Clients { count: clients, consumer: &consumer_args, producer: &producer_args };
        let measured = self.measure(broker, &mut advisories, clients, &out);
        self.runtime.block_on(advisories.close());
        measured
    }

    fn measure(
        &self,
        broker: &Target,
        advisories: &mut ConsumerAdvisories,
        clients: Clients,
        out: &Path,
    ) -> anyhow::Result<RunFigures> {
        let tps = self.ticks_per_second;
        let before = ProcessCounters::read(broker.pid)?;
        let threads_before = ThreadTimes::read(broker.pid);
        let machine_before = machine_busy_ticks()?;
        let started = Instant::now();
        let mut consumer = PerfClient::spawn(&self.binary, "consumer", clients.consumer, out)?;
        let subscribed = self.runtime.block_on(advisories.wait_for(
            clients.count as i64,
            SUBSCRIBE_TIMEOUT,
            || Ok(consumer.poll(tps)?.is_some()),
        ));
        if let Err(error) = subscribed {
            consumer.kill();
            bail!("{error:#}; the consumer's stderr:\n{}", consumer.stderr_tail());
        }
        let mut producer = PerfClient::spawn(&self.binary, "producer", clients.producer, out)?;
        let deadline = started + self.run_timeout;
        let (produced, consumed) = loop {
            let produced = finished(&mut producer, &mut consumer, tps)?;
            let consumed = finished(&mut consumer, &mut producer, tps)?;
            if let (Some(p), Some(c)) = (&produced, &consumed) {
                break (p.clone(), c.clone());
            }
            if Instant::now() >= deadline {
                producer.kill();
                consumer.kill();
                bail!("the run took longer than {:?}; both clients killed", self.run_timeout);
            }
            std::thread::sleep(POLL);
        };
        let after = ProcessCounters::read(broker.pid)?;
        let threads_after = ThreadTimes::read(broker.pid);
        let machine = self.seconds(machine_busy_ticks()?.saturating_sub(machine_before));
        let wall = produced.at.max(consumed.at).duration_since(started).as_secs_f64();

        let (messages, seconds) = whole_run(&consumer.stdout()?, "received")?;
        let (_, producer_seconds) = whole_run(&producer.stdout()?, "sent")?;
        ensure!(messages > 0 && seconds > 0.0, "the consumer received {messages} in {seconds} s");
        let per_message = |seconds: f64| seconds * 1e6 / messages as f64;
        let broker_cpu = self.seconds(after.cpu_ticks.saturating_sub(before.cpu_ticks));
        let share = |ticks: u64| match broker.jvm && broker_cpu > 0.0 {
            true => self.seconds(ticks) / broker_cpu,
            false => 0.0,
        };
        let (producer_cpu, consumer_cpu) = (produced.cpu.as_secs_f64(), consumed.cpu.as_secs_f64());
        let syscalls = match (before.read_write_syscalls, after.read_write_syscalls) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b) as f64 / messages as f64),
            _ => None,
        };
        Ok(RunFigures {
            rate: messages as f64 / seconds,
            consumer_seconds: seconds,
            producer_seconds,
            broker_us: per_message(broker_cpu),
            client_us: per_message(producer_cpu + consumer_cpu),
            syscalls,
            broker_cores: broker_cpu / wall,
            producer_cores: producer_cpu / wall,
            consumer_cores: consumer_cpu / wall,
            other_cores: (machine - broker_cpu - producer_cpu - consumer_cpu).max(0.0) / wall,
            jit_share: share(threads_after.since(&threads_before, is_jit_thread)),
            gc_share: share(threads_after.since(&threads_before, is_gc_thread)),
        })
    }
}

/// The two sides of a run: how many clients each, and each process's arguments.
#[derive(Clone, Copy)]
struct Clients<'a> {
    count: usize,
    consumer: &'a [String],
    producer: &'a [String],
}

/// `client`'s end, if it has exited; a failed exit kills `other` (which would otherwise wait
/// for messages that never come, or send to nobody) and is an error.
fn finished(
    client: &mut PerfClient,
    other: &mut PerfClient,
    ticks_per_second: u64,
) -> anyhow::Result<Option<Finished>> {
    let Some(end) = client.poll(ticks_per_second)?.cloned() else {
        return Ok(None);
    };
    if !end.status.success() {
        other.kill();
        bail!("the {} exited with {}:\n{}", client.name(), end.status, client.stderr_tail());
    }
    Ok(Some(end))
}

/// `N` and `X` of a perf client's `Messages VERB in the whole run (ramps included): N in X
/// s` line (`received` for a consumer, whose figures `scripts/compare-activemq` divides for
/// its msgs/s; `sent` for a producer).
pub fn whole_run(stdout: &str, verb: &str) -> anyhow::Result<(u64, f64)> {
    let prefix = format!("Messages {verb} in the whole run");
    let line = stdout
        .lines()
        .find(|line| line.starts_with(&prefix))
        .with_context(|| format!("no `{prefix}` line in the client's output"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let word = |from_end: usize| words.len().checked_sub(from_end).map(|i| words[i]);
    let messages = word(4).and_then(|w| w.parse().ok());
    let seconds = word(2).and_then(|w| w.parse().ok());
    match (messages, seconds) {
        (Some(messages), Some(seconds)) => Ok((messages, seconds)),
        _ => bail!("cannot read a count and seconds in `{line}`"),
    }
}

/// A subscription to `ActiveMQ.Advisory.Consumer.Queue.<queue>`, which both brokers publish
/// on when a consumer of the queue starts or stops, with the queue's `consumerCount`: the
/// moment the `ferromq perf` consumers have subscribed, which the perf tool does not print.
pub struct ConsumerAdvisories {
    client: OpenWireClient,
    consumer: Consumer,
    /// The largest `consumerCount` seen, or the advisories counted where it is missing.
    seen: i64,
}

impl ConsumerAdvisories {
    pub async fn watch(broker: SocketAddr, queue: &str) -> anyhow::Result<ConsumerAdvisories> {
        let host = broker.ip().to_string();
        let client = OpenWireClient::connect(&host, broker.port(), OpenWireOptions::default())
            .await
            .with_context(|| format!("connecting to {broker} for the consumer advisories"))?;
        let topic = Destination::topic(format!("ActiveMQ.Advisory.Consumer.Queue.{queue}"));
        let consumer = client.subscribe(SubscribeOptions::new(topic)).await?;
        Ok(ConsumerAdvisories { client, consumer, seen: 0 })
    }

    /// Waits up to `within` until the queue has `consumers` consumers, giving up early when
    /// `gone` says the process that should subscribe them has ended.
    pub async fn wait_for(
        &mut self,
        consumers: i64,
        within: Duration,
        mut gone: impl FnMut() -> anyhow::Result<bool>,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        while self.seen < consumers {
            ensure!(!gone()?, "the consumer process ended before subscribing");
            ensure!(
                Instant::now() < deadline,
                "{} of {consumers} consumers subscribed after {within:?}",
                self.seen
            );
            let Some(advisory) = self.consumer.receive(Duration::from_millis(200)).await? else {
                continue;
            };
            self.seen = match advisory.property("consumerCount").and_then(|v| v.as_i64()) {
                Some(count) => self.seen.max(count),
                None => self.seen + 1,
            };
        }
        Ok(())
    }

    /// Closes the connection; an error (the broker closed it first) does not matter here.
    pub async fn close(self) {
        let _ = self.consumer.close().await;
        let _ = self.client.close().await;
    }
}

/// The median time of `exchanges` one-byte ping-pongs over a loopback TCP connection (Nagle
/// off on both ends), an echo thread on the other end: what each synchronous send pays for
/// the network on top of the disk.
pub fn loopback_round_trip(exchanges: usize) -> anyhow::Result<Duration> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding the echo listener")?;
    let addr = listener.local_addr()?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.set_nodelay(true)?;
        let mut byte = [0u8; 1];
        while stream.read(&mut byte)? == 1 {
            stream.write_all(&byte)?;
        }
        Ok(())
    });
    let mut stream = TcpStream::connect(addr).context("connecting to the echo thread")?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut byte = [0u8; 1];
    let mut samples = Vec::with_capacity(exchanges);
    for _ in 0..exchanges {
        let start = Instant::now();
        stream.write_all(&[1])?;
        stream.read_exact(&mut byte).context("the echo")?;
        samples.push(start.elapsed());
    }
    drop(stream);
    echo.join().map_err(|_| anyhow!("the echo thread panicked"))??;
    Ok(Latencies::new(samples).percentile(50.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consumers_whole_run_line_gives_count_and_seconds() {
        let out = "Latency (5 messages): p50 1 ms\n\
                   Messages received in the whole run (ramps included): 20000 in 1.25 s\n";
        assert_eq!(whole_run(out, "received").ok(), Some((20000, 1.25)));
        assert!(whole_run(out, "sent").is_err());
        assert!(whole_run("Messages received in the whole run: many", "received").is_err());
        assert!(whole_run("", "received").is_err());
    }

    #[test]
    fn io_counters_add_reads_and_writes() {
        let io = "rchar: 22051\nwchar: 1679\nsyscr: 36\nsyscw: 105\nread_bytes: 0\n";
        assert_eq!(parse_io_syscalls(io), Some(141));
        assert_eq!(parse_io_syscalls("rchar: 1\n"), None);
    }

    #[test]
    fn jvm_threads_are_told_from_the_brokers() {
        assert!(is_jit_thread("C2 CompilerThre"));
        assert!(is_gc_thread("G1 Conc#0") && is_gc_thread("GC Thread#1"));
        for name in ["ActiveMQ NIO Wo", "tokio-runtime-w", "java"] {
            assert!(!is_jit_thread(name) && !is_gc_thread(name), "{name}");
        }
    }

    #[test]
    fn the_state_comes_after_the_command_name() {
        assert_eq!(process_state("42 (a) b) Z 1 42"), Some('Z'));
        assert_eq!(process_state("42 (perf) S 1"), Some('S'));
        assert_eq!(process_state("garbage"), None);
    }
}
