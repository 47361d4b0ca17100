//! The files a perf run leaves in `sysTest.reportDir`: the plugin's XML report (its
//! settings, every sample, the summary) and an SVG chart of the throughput over time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::props::{PerfRole, PerfSettings, RunBasis, SessAckMode};
use super::{CpuRecord, CpuSummary, PerfOutcome};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct ReportError {
    /// The file or directory.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// `&`, `<`, `>`, `'` and `"` as entities, so any value is safe in text and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            // Control characters other than white space are not allowed in XML 1.0.
            c if c.is_control() && !matches!(c, '\t' | '\n' | '\r') => {
                let _ = write!(out, "&#xFFFD;");
            }
            c => out.push(c),
        }
    }
    out
}

fn millis(duration: std::time::Duration) -> String {
    duration.as_millis().to_string()
}

/// The settings groups of the report, named as the plugin names them.
fn settings_groups(
    settings: &PerfSettings,
    outcome: &PerfOutcome,
) -> Vec<(&'static str, Vec<(String, String)>)> {
    let s = settings;
    let kv = |k: &str, v: String| (k.to_owned(), v);
    let system = vec![
        kv("reportDir", s.report_dir.display().to_string()),
        kv("reportName", s.report_name()),
        kv("samplers", if s.cpu_sampler { "tp,cpu" } else { "tp" }.into()),
        kv("clientPrefix", s.client_prefix.clone()),
        kv("numClients", s.num_clients.to_string()),
        kv("totalDests", s.total_dests.to_string()),
        kv("destDistro", s.dest_distro.name().into()),
    ];
    let factory = vec![
        kv("brokerURL", s.broker.to_string()),
        kv("userName", s.user.clone().unwrap_or_default()),
        kv("useAsyncSend", s.use_async_send.to_string()),
        kv("protocol", format!("{:?}", s.protocol())),
        kv("provider", format!("ferromq perf {}", env!("CARGO_PKG_VERSION"))),
    ];
    let (count_key, duration_key, type_key) = match s.role {
        PerfRole::Producer => ("sendCount", "sendDuration", "sendType"),
        PerfRole::Consumer => ("recvCount", "recvDuration", "recvType"),
    };
    let mut client = vec![
        kv("destName", s.dest_name.to_string()),
        kv("sessTransacted", s.sess_transacted.to_string()),
        kv("commitAfterXMsgs", s.commit_after.to_string()),
    ];
    match s.basis {
        RunBasis::Time(duration) => {
            client.push(kv(type_key, "time".into()));
            client.push(kv(duration_key, millis(duration)));
        }
        RunBasis::Count(count) => {
            client.push(kv(type_key, "count".into()));
            client.push(kv(count_key, count.to_string()));
        }
    }
    match s.role {
        PerfRole::Producer => {
            let mode = if s.persistent { "persistent" } else { "nonpersistent" };
            client.push(kv("deliveryMode", mode.into()));
            client.push(kv("messageSize", s.message_size.to_string()));
            client.push(kv("sendDelay", millis(s.delay)));
        }
        PerfRole::Consumer => {
            let ack = match s.ack_mode {
                SessAckMode::Auto => "autoAck",
                SessAckMode::Client => "clientAck",
                SessAckMode::DupsOk => "dupsAck",
                SessAckMode::Transacted => "transacted",
            };
            client.push(kv("sessAckMode", ack.into()));
            client.push(kv("durable", s.durable.to_string()));
            client.push(kv("unsubscribe", s.unsubscribe.to_string()));
            client.push(kv("recvDelay", millis(s.delay)));
            client.push(kv("messageSelector", s.selector.clone().unwrap_or_default()));
        }
    }
    let sampler = vec![
        kv("interval", millis(outcome.interval)),
        kv("duration", outcome.sampled_duration.map(millis).unwrap_or_default()),
        kv("rampUpTime", millis(outcome.ramp_up)),
        kv("rampDownTime", millis(outcome.ramp_down)),
    ];
    // The file as given (passwords left out), for the record.
    let given = s
        .given
        .iter()
        .filter(|(key, _)| !key.to_ascii_lowercase().contains("password"))
        .cloned()
        .collect();
    vec![
        ("testSystemSettings", system),
        ("jmsFactorySettings", factory),
        ("jmsClientSettings", client),
        ("tpSamplerSettings", sampler),
        ("givenProperties", given),
    ]
}

/// The XML report, in the plugin's layout: `<testResult>` with a `<property>` of
/// `<props>` per settings group, `performanceData` listing every sample as
/// `<tpdata index= clientName= throughput=/>` (and with the cpu sampler
/// `<cpudata index= us= sy= id= wa= .../>`, see [`super::cpu`]), and `perfTpSummary`; then
/// `perfCpuSummary` with the plugin's CPU summary keys (the plugin writes them in a second
/// property also named `perfTpSummary`, which readers cannot tell apart; ferromq names it),
/// and, ferromq's addition, the latency percentiles in `perfLatencySummary`.
pub fn xml_report(settings: &PerfSettings, outcome: &PerfOutcome) -> String {
    let mut xml = String::new();
    let props = |xml: &mut String, name: &str, entries: &[(String, String)]| {
        let _ = writeln!(xml, "<property name='{}'>", escape(name));
        xml.push_str("<props>\n");
        for (key, value) in entries {
            let _ = writeln!(xml, "<prop key='{}'>{}</prop>", escape(key), escape(value));
        }
        xml.push_str("</props>\n</property>\n");
    };
    xml.push_str("<?xml version='1.0' encoding='UTF-8'?>\n<testResult>\n");
    for (name, entries) in settings_groups(settings, outcome) {
        props(&mut xml, name, &entries);
    }
    xml.push_str("<property name='performanceData'>\n<list>\n");
    let samples = outcome.clients.iter().map(|c| c.samples.len()).max().unwrap_or(0);
    for index in 0..samples {
        for client in &outcome.clients {
            if let Some(throughput) = client.samples.get(index) {
                let _ = writeln!(
                    xml,
                    "<tpdata index='{index}' clientName='{}' throughput='{throughput}' />",
                    escape(&client.name)
                );
            }
        }
    }
    let cpu_samples = match &outcome.cpu {
        Some(CpuRecord::Samples(samples)) => samples.as_slice(),
        _ => &[],
    };
    for sample in cpu_samples {
        xml.push_str("<cpudata");
        for (key, value) in sample.attributes() {
            let _ = write!(xml, " {key}='{}'", escape(&value));
        }
        xml.push_str(" />\n");
    }
    if let Some(CpuRecord::Unavailable(why)) = &outcome.cpu {
        // The plugin logs sampler trouble in the same list.
        let _ = writeln!(xml, "<info>[INFO]cpu sampler: {}</info>", escape(why));
    }
    xml.push_str("</list>\n</property>\n");
    if let Some(summary) = &outcome.summary {
        // The plugin writes `clientName=X,value=N` here, without the space it prints.
        let entries: Vec<(String, String)> = summary
            .lines()
            .into_iter()
            .map(|(key, _, value)| (key.to_owned(), value.replace(", value=", ",value=")))
            .collect();
        props(&mut xml, "perfTpSummary", &entries);
    }
    if let Some(cpu) = CpuSummary::compute(cpu_samples) {
        props(&mut xml, "perfCpuSummary", &cpu.entries(cpu_samples));
    }
    if let Some(latency) = &outcome.latency {
        let micros = |d: std::time::Duration| format!("{:.1}", d.as_secs_f64() * 1e6);
        let entries = vec![
            ("measured".to_owned(), latency.what.to_owned()),
            ("count".to_owned(), latency.count.to_string()),
            ("p50Micros".to_owned(), micros(latency.p50)),
            ("p90Micros".to_owned(), micros(latency.p90)),
            ("p99Micros".to_owned(), micros(latency.p99)),
            ("p999Micros".to_owned(), micros(latency.p999)),
            ("maxMicros".to_owned(), micros(latency.max)),
        ];
        props(&mut xml, "perfLatencySummary", &entries);
    }
    xml.push_str("</testResult>\n");
    xml
}

/// A line chart of the system throughput (all clients, messages per second) per sample.
pub fn svg_chart(settings: &PerfSettings, outcome: &PerfOutcome) -> String {
    const WIDTH: f64 = 800.0;
    const HEIGHT: f64 = 400.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 50.0;
    let per_second = 1.0 / outcome.interval.as_secs_f64().max(1e-3);
    let samples = outcome.clients.iter().map(|c| c.samples.len()).max().unwrap_or(0);
    let rates: Vec<f64> = (0..samples)
        .map(|i| {
            let sum: u64 = outcome.clients.iter().filter_map(|c| c.samples.get(i)).sum();
            sum as f64 * per_second
        })
        .collect();
    let top = nice_ceiling(rates.iter().copied().fold(0.0, f64::max));
    let seconds = samples as f64 * outcome.interval.as_secs_f64();
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |t: f64| LEFT + if seconds > 0.0 { t / seconds * plot_w } else { 0.0 };
    let y = |v: f64| TOP + plot_h - v / top * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{HEIGHT}' \
         viewBox='0 0 {WIDTH} {HEIGHT}' font-family='sans-serif' font-size='12'>"
    );
    let _ = writeln!(svg, "<rect width='100%' height='100%' fill='white'/>");
    let title = format!(
        "{}: {} clients (msgs/s per {} ms sample)",
        settings.report_name(),
        settings.num_clients,
        outcome.interval.as_millis()
    );
    let _ = writeln!(svg, "<text x='{LEFT}' y='18' font-size='14'>{}</text>", escape(&title));
    // The broker URL on a line of its own, in a smaller font: a failover URL with options is
    // longer than the chart is wide.
    let _ = writeln!(
        svg,
        "<text x='{LEFT}' y='33' font-size='10' fill='#555'>{}</text>",
        escape(&settings.broker.to_string())
    );
    // Horizontal grid lines with their values.
    for step in 0..=4 {
        let value = top * f64::from(step) / 4.0;
        let at = y(value);
        let _ = writeln!(
            svg,
            "<line x1='{LEFT}' y1='{at:.1}' x2='{:.1}' y2='{at:.1}' stroke='#ddd'/>\
             <text x='{:.1}' y='{:.1}' text-anchor='end'>{value:.0}</text>",
            LEFT + plot_w,
            LEFT - 6.0,
            at + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<line x1='{LEFT}' y1='{:.1}' x2='{:.1}' y2='{:.1}' stroke='black'/>",
        TOP + plot_h,
        LEFT + plot_w,
        TOP + plot_h
    );
    let _ = writeln!(
        svg,
        "<text x='{:.1}' y='{:.1}' text-anchor='middle'>seconds of sampling ({} samples)</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        samples
    );
    let _ = writeln!(svg, "<text x='{LEFT}' y='{:.1}'>0</text>", TOP + plot_h + 16.0);
    let _ = writeln!(
        svg,
        "<text x='{:.1}' y='{:.1}' text-anchor='end'>{seconds:.1}</text>",
        LEFT + plot_w,
        TOP + plot_h + 16.0
    );
    if !rates.is_empty() {
        let interval = outcome.interval.as_secs_f64();
        let points: Vec<String> = rates
            .iter()
            .enumerate()
            // Each sample covers an interval: plot it at the interval's end.
            .map(|(i, rate)| format!("{:.1},{:.1}", x((i + 1) as f64 * interval), y(*rate)))
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill='none' stroke='#1f6fb2' stroke-width='2' points='{}'/>",
            points.join(" ")
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// 1, 2 or 5 times a power of ten, at or above `value` (at least 1).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    for factor in [1.0, 2.0, 5.0, 10.0] {
        if factor * power >= value {
            return factor * power;
        }
    }
    10.0 * power
}

/// Writes `<reportDir>/<name>.xml` and `<reportDir>/<name>.svg`; returns both paths.
pub fn write_reports(
    settings: &PerfSettings,
    outcome: &PerfOutcome,
) -> Result<(PathBuf, PathBuf), ReportError> {
    let dir = settings.report_dir.as_path();
    std::fs::create_dir_all(dir)
        .map_err(|source| ReportError { path: dir.to_path_buf(), source })?;
    let name = settings.report_name();
    let write = |path: &Path, text: String| {
        std::fs::write(path, text)
            .map_err(|source| ReportError { path: path.to_path_buf(), source })
    };
    let xml = dir.join(format!("{name}.xml"));
    write(&xml, xml_report(settings, outcome))?;
    let svg = dir.join(format!("{name}.svg"));
    write(&svg, svg_chart(settings, outcome))?;
    Ok((xml, svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_and_quotes() {
        assert_eq!(escape("a<b>&'\""), "a&lt;b&gt;&amp;&apos;&quot;");
        assert_eq!(escape("x\u{1}y"), "x&#xFFFD;y");
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(1873.4), 2000.0);
        assert_eq!(nice_ceiling(2000.0), 2000.0);
        assert_eq!(nice_ceiling(4100.0), 5000.0);
    }
}
