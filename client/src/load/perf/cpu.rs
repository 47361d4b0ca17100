//! The `cpu` sampler (`sysTest.samplers=tp,cpu`): the machine's CPU use per sampler
//! interval, and this process's share of it.
//!
//! The plugin's `CpuSamplerTask` runs `vmstat -n <interval s>` during the ramp window and
//! writes each line as `<cpudata index='N' us= sy= id= wa= .../>` in the report's
//! `performanceData` list. ferromq reads the kernel's counters instead (`/proc/stat`,
//! `/proc/self/stat`; no process to spawn, and intervals under a second work) and reports
//! the same vmstat columns: `us` (user + nice), `sy` (system + irq + softirq), `id`, `wa`
//! (iowait), `st` (steal), `cs` (context switches per second), as whole percentages like
//! vmstat's. It adds `usage` (user + nice + system + irq + softirq + steal over the total,
//! one decimal) and `proc` (this process's user + system time over the machine's total, so
//! on the same scale as `usage`).

use std::fmt;
use std::time::Duration;

/// Why the CPU counters could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CpuError {
    /// The file is not there (not Linux, or /proc not mounted) or unreadable.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file does not have the expected layout.
    #[error("unexpected contents in {path}: {why}")]
    Parse {
        /// The file.
        path: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// The machine's CPU time from the `cpu` line of `/proc/stat`, in clock ticks, summed over
/// all CPUs since boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineTimes {
    /// user + nice (vmstat's `us`; guest time is already inside user and nice).
    pub user: u64,
    /// system + irq + softirq (vmstat's `sy`).
    pub system: u64,
    /// idle.
    pub idle: u64,
    /// iowait.
    pub iowait: u64,
    /// steal.
    pub steal: u64,
    /// Context switches since boot (the `ctxt` line), if given.
    pub context_switches: Option<u64>,
}

impl MachineTimes {
    /// Busy time: user + nice + system + irq + softirq + steal.
    pub fn busy(&self) -> u64 {
        self.user + self.system + self.steal
    }

    /// Every tick: busy + idle + iowait.
    pub fn total(&self) -> u64 {
        self.busy() + self.idle + self.iowait
    }
}

/// Parses `/proc/stat`: its aggregate `cpu` line and its `ctxt` line.
pub fn parse_proc_stat(text: &str) -> Result<MachineTimes, CpuError> {
    let bad = |why: String| CpuError::Parse { path: "/proc/stat", why };
    let line = text
        .lines()
        .find(|line| line.split_whitespace().next() == Some("cpu"))
        .ok_or_else(|| bad("no `cpu` line".into()))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|field| field.parse::<u64>().map_err(|_| bad(format!("`{field}` in `{line}`"))))
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal guest guest_nice; kernels before
    // 2.6.11 stop after softirq (no steal), before 2.5.41 after idle.
    if fields.len() < 4 {
        return Err(bad(format!("too few fields in `{line}`")));
    }
    let field = |i: usize| fields.get(i).copied().unwrap_or(0);
    let context_switches = text
        .lines()
        .find_map(|line| line.strip_prefix("ctxt "))
        .and_then(|value| value.trim().parse().ok());
    Ok(MachineTimes {
        user: field(0) + field(1),
        system: field(2) + field(5) + field(6),
        idle: field(3),
        iowait: field(4),
        steal: field(7),
        context_switches,
    })
}

/// Parses `/proc/self/stat` (or `/proc/PID/stat`): the process's user + system time in
/// clock ticks (fields 14 and 15).
pub fn parse_process_stat(text: &str) -> Result<u64, CpuError> {
    let bad = |why: String| CpuError::Parse { path: "/proc/self/stat", why };
    // The command name (field 2) is in parentheses and may itself hold spaces and
    // parentheses: the fields after it start after the last `)`.
    let end = text.rfind(')').ok_or_else(|| bad("no `)` after the command name".into()))?;
    let rest: Vec<&str> = text[end + 1..].split_whitespace().collect();
    // rest[0] is field 3 (state): utime (14) is rest[11], stime (15) rest[12].
    let tick = |i: usize| -> Result<u64, CpuError> {
        let field = rest.get(i).ok_or_else(|| bad(format!("no field {}", i + 3)))?;
        field.parse().map_err(|_| bad(format!("field {} is `{field}`", i + 3)))
    };
    Ok(tick(11)? + tick(12)?)
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuSnapshot {
    /// The machine's.
    pub machine: MachineTimes,
    /// This process's user + system ticks.
    pub process: u64,
}

impl CpuSnapshot {
    /// Reads `/proc/stat` and `/proc/self/stat` now.
    pub fn read() -> Result<CpuSnapshot, CpuError> {
        let read = |path: &'static str| {
            std::fs::read_to_string(path).map_err(|source| CpuError::Read { path, source })
        };
        Ok(CpuSnapshot {
            machine: parse_proc_stat(&read("/proc/stat")?)?,
            process: parse_process_stat(&read("/proc/self/stat")?)?,
        })
    }
}

/// One interval's CPU use, as percentages of the machine (all CPUs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSample {
    /// The sample's index, as the throughput samples'.
    pub index: usize,
    /// user + nice.
    pub user: f64,
    /// system + irq + softirq.
    pub system: f64,
    /// idle.
    pub idle: f64,
    /// iowait.
    pub wait: f64,
    /// steal.
    pub steal: f64,
    /// Everything but idle and iowait.
    pub usage: f64,
    /// This process's user + system time.
    pub process: f64,
    /// Context switches per second, when the kernel counts them.
    pub context_switches: Option<u64>,
}

impl CpuSample {
    /// The use between `before` and `after`, `elapsed` apart. A counter that went
    /// backwards (it cannot, but a bad read could) counts as zero rather than wrapping.
    pub fn between(
        index: usize,
        before: &CpuSnapshot,
        after: &CpuSnapshot,
        elapsed: Duration,
    ) -> CpuSample {
        let (a, b) = (&before.machine, &after.machine);
        let total = b.total().saturating_sub(a.total());
        let percent = |ticks: u64| {
            if total == 0 {
                0.0
            } else {
                ticks as f64 * 100.0 / total as f64
            }
        };
        let seconds = elapsed.as_secs_f64();
        let context_switches = match (a.context_switches, b.context_switches) {
            (Some(a), Some(b)) if seconds > 0.0 => {
                Some((b.saturating_sub(a) as f64 / seconds).round() as u64)
            }
            _ => None,
        };
        CpuSample {
            index,
            user: percent(b.user.saturating_sub(a.user)),
            system: percent(b.system.saturating_sub(a.system)),
            idle: percent(b.idle.saturating_sub(a.idle)),
            wait: percent(b.iowait.saturating_sub(a.iowait)),
            steal: percent(b.steal.saturating_sub(a.steal)),
            usage: percent(b.busy().saturating_sub(a.busy())),
            process: percent(after.process.saturating_sub(before.process)),
            context_switches,
        }
    }

    /// The `<cpudata>` attributes: vmstat's columns (whole percentages), then ferromq's.
    pub fn attributes(&self) -> Vec<(&'static str, String)> {
        let whole = |v: f64| format!("{}", v.round() as u64);
        let mut out = vec![
            ("index", self.index.to_string()),
            ("us", whole(self.user)),
            ("sy", whole(self.system)),
            ("id", whole(self.idle)),
            ("wa", whole(self.wait)),
            ("st", whole(self.steal)),
        ];
        if let Some(cs) = self.context_switches {
            out.push(("cs", cs.to_string()));
        }
        out.push(("usage", format!("{:.1}", self.usage)));
        out.push(("proc", format!("{:.1}", self.process)));
        out
    }
}

/// The CPU samples of a run, or why there are none.
#[derive(Debug, Clone, PartialEq)]
pub enum CpuRecord {
    /// One per sampler interval.
    Samples(Vec<CpuSample>),
    /// The counters could not be read (the reason).
    Unavailable(String),
}

/// Averages and maxima over a run's CPU samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuSummary {
    /// The number of samples.
    pub samples: usize,
    /// Average machine usage, %.
    pub average_usage: f64,
    /// Highest machine usage, %.
    pub max_usage: f64,
    /// Average process usage, % of the machine.
    pub average_process: f64,
    /// Highest process usage, % of the machine.
    pub max_process: f64,
    /// Average user, system, idle and iowait %.
    pub average_user: f64,
    /// See `average_user`.
    pub average_system: f64,
    /// See `average_user`.
    pub average_idle: f64,
    /// See `average_user`.
    pub average_wait: f64,
}

impl CpuSummary {
    /// The summary of `samples`; `None` without any.
    pub fn compute(samples: &[CpuSample]) -> Option<CpuSummary> {
        if samples.is_empty() {
            return None;
        }
        let n = samples.len() as f64;
        let average = |f: fn(&CpuSample) -> f64| samples.iter().map(f).sum::<f64>() / n;
        let max = |f: fn(&CpuSample) -> f64| samples.iter().map(f).fold(0.0, f64::max);
        Some(CpuSummary {
            samples: samples.len(),
            average_usage: average(|s| s.usage),
            max_usage: max(|s| s.usage),
            average_process: average(|s| s.process),
            max_process: max(|s| s.process),
            average_user: average(|s| s.user),
            average_system: average(|s| s.system),
            average_idle: average(|s| s.idle),
            average_wait: average(|s| s.wait),
        })
    }

    /// The report's `perfCpuSummary` entries: the plugin's CpuReportPlugin keys for the
    /// vmstat columns ferromq has (sums of the per-sample whole percentages, and their
    /// averages), then ferromq's usage figures.
    pub fn entries(&self, samples: &[CpuSample]) -> Vec<(String, String)> {
        let sum =
            |f: fn(&CpuSample) -> f64| -> u64 { samples.iter().map(|s| f(s).round() as u64).sum() };
        let n = samples.len().max(1) as f64;
        let mut out = Vec::new();
        let mut pair = |key: &str, total: u64| {
            out.push((key.to_owned(), total.to_string()));
            out.push((format!("Ave{key}"), super::java_double(total as f64 / n)));
        };
        pair("UserTime", sum(|s| s.user));
        pair("SystemTime", sum(|s| s.system));
        pair("IdleTime", sum(|s| s.idle));
        pair("WaitingTime", sum(|s| s.wait));
        let switches: Vec<u64> = samples.iter().filter_map(|s| s.context_switches).collect();
        if !switches.is_empty() {
            let total: u64 = switches.iter().sum();
            out.push(("ContextSwitches".into(), total.to_string()));
            out.push((
                "AveContextSwitches".into(),
                super::java_double(total as f64 / switches.len() as f64),
            ));
        }
        out.push(("AveCpuUsage".into(), format!("{:.1}", self.average_usage)));
        out.push(("MaxCpuUsage".into(), format!("{:.1}", self.max_usage)));
        out.push(("AveProcessCpuUsage".into(), format!("{:.1}", self.average_process)));
        out.push(("MaxProcessCpuUsage".into(), format!("{:.1}", self.max_process)));
        out
    }
}

impl fmt::Display for CpuSummary {
    /// `CPU usage: avg 43.2% max 71.0% (this process: avg 12.1% max 20.3%), N samples`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CPU usage: avg {:.1}% max {:.1}% (this process: avg {:.1}% max {:.1}% of the \
             machine; {} samples)",
            self.average_usage,
            self.max_usage,
            self.average_process,
            self.max_process,
            self.samples
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT_BEFORE: &str = "\
cpu  1000 100 400 8000 200 50 50 0 30 0
cpu0 500 50 200 4000 100 25 25 0 15 0
cpu1 500 50 200 4000 100 25 25 0 15 0
intr 12345 0 0
ctxt 100000
btime 1700000000
processes 4242
";

    const STAT_AFTER: &str = "\
cpu  1300 100 500 8400 300 60 80 60 40 0
cpu0 650 50 250 4200 150 30 40 30 20 0
cpu1 650 50 250 4200 150 30 40 30 20 0
ctxt 102000
";

    #[test]
    fn proc_stat_parses_the_cpu_and_ctxt_lines() {
        let times = parse_proc_stat(STAT_BEFORE).expect("parses");
        assert_eq!(
            times,
            MachineTimes {
                user: 1100,
                system: 500,
                idle: 8000,
                iowait: 200,
                steal: 0,
                context_switches: Some(100_000),
            }
        );
        assert_eq!(times.busy(), 1600);
        assert_eq!(times.total(), 9800);
        // Old kernels: four fields, no ctxt.
        let old = parse_proc_stat("cpu 1 2 3 4\n").expect("parses");
        assert_eq!((old.user, old.system, old.idle, old.total()), (3, 3, 4, 10));
        assert_eq!(old.context_switches, None);
    }

    #[test]
    fn bad_proc_stat_is_an_error_not_a_panic() {
        for text in ["", "intr 1\n", "cpu 1 2\n", "cpu 1 x 3 4\n", "cpu0 1 2 3 4\n"] {
            let error = parse_proc_stat(text).expect_err(text).to_string();
            assert!(error.contains("/proc/stat"), "{error}");
        }
    }

    #[test]
    fn process_stat_reads_utime_and_stime() {
        let text = "4242 (ferromq perf) S 1 4242 4242 0 -1 4194304 500 0 0 0 \
                    120 35 0 0 20 0 9 0 100 1000000 500 18446744073709551615";
        assert_eq!(parse_process_stat(text).expect("parses"), 155);
        // A command name with parentheses and spaces.
        let tricky = "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5 6 7";
        assert_eq!(parse_process_stat(tricky).expect("parses"), 7);
        assert!(parse_process_stat("7 (x) R 1 2").is_err());
        assert!(parse_process_stat("no parenthesis").is_err());
    }

    #[test]
    fn deltas_are_shares_of_the_ticks_in_between() {
        let before = CpuSnapshot { machine: parse_proc_stat(STAT_BEFORE).expect("p"), process: 50 };
        let after = CpuSnapshot { machine: parse_proc_stat(STAT_AFTER).expect("p"), process: 150 };
        // Deltas: user+nice 300, system+irq+softirq 100+10+30 = 140, idle 400, iowait 100,
        // steal 60; total 1000; busy 500.
        let sample = CpuSample::between(3, &before, &after, Duration::from_secs(2));
        assert_eq!(sample.index, 3);
        assert_eq!(sample.user, 30.0);
        assert_eq!(sample.system, 14.0);
        assert_eq!(sample.idle, 40.0);
        assert_eq!(sample.wait, 10.0);
        assert_eq!(sample.steal, 6.0);
        assert_eq!(sample.usage, 50.0);
        assert_eq!(sample.process, 10.0);
        assert_eq!(sample.context_switches, Some(1000));
        let attributes: Vec<String> =
            sample.attributes().iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            attributes.join(" "),
            "index=3 us=30 sy=14 id=40 wa=10 st=6 cs=1000 usage=50.0 proc=10.0"
        );
        // No ticks in between (or counters going backwards): zeros, not NaN or a wrap.
        let same = CpuSample::between(0, &after, &before, Duration::ZERO);
        assert_eq!((same.usage, same.process, same.context_switches), (0.0, 0.0, None));
    }

    #[test]
    fn the_summary_averages_and_maxes() {
        let sample = |index, usage, process| CpuSample {
            index,
            user: usage,
            system: 0.0,
            idle: 100.0 - usage,
            wait: 0.0,
            steal: 0.0,
            usage,
            process,
            context_switches: Some(10),
        };
        let samples = [sample(0, 20.0, 5.0), sample(1, 60.0, 15.0), sample(2, 40.0, 10.0)];
        let summary = CpuSummary::compute(&samples).expect("samples");
        assert_eq!((summary.average_usage, summary.max_usage), (40.0, 60.0));
        assert_eq!((summary.average_process, summary.max_process), (10.0, 15.0));
        assert_eq!(
            summary.to_string(),
            "CPU usage: avg 40.0% max 60.0% (this process: avg 10.0% max 15.0% of the \
             machine; 3 samples)"
        );
        let entries = summary.entries(&samples);
        assert!(entries.contains(&("UserTime".into(), "120".into())), "{entries:?}");
        assert!(entries.contains(&("AveUserTime".into(), "40.0".into())), "{entries:?}");
        assert!(entries.contains(&("AveContextSwitches".into(), "10.0".into())), "{entries:?}");
        assert!(CpuSummary::compute(&[]).is_none());
    }

    #[test]
    fn this_machine_can_be_read() {
        // Only where /proc exists (Linux).
        if std::path::Path::new("/proc/stat").exists() {
            let snapshot = CpuSnapshot::read().expect("reads /proc");
            assert!(snapshot.machine.total() > 0);
        }
    }
}
