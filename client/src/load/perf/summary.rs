//! [`ThroughputSummary`]: the plugin's SYSTEM THROUGHPUT SUMMARY, computed from each
//! client's samples as the plugin's throughput report computes it, and printed in its
//! format (Java's rendering of numbers included).

use std::fmt;

/// One client's throughput samples: messages per sampler interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSamples {
    /// `JmsProducer0`, ...
    pub name: String,
    /// Messages in each interval, in order.
    pub samples: Vec<u64>,
}

/// A client name with a value (`clientName=JmsProducer5, value=23917`).
#[derive(Debug, Clone, PartialEq)]
pub struct Named<T> {
    /// The client.
    pub client: String,
    /// Its value.
    pub value: T,
}

/// The summary lines, with the plugin's meaning.
///
/// The plugin's averages are per client and then added up: a client's average throughput
/// is its messages over its number of samples, "excluding min/max" leaves out every sample
/// equal to that client's minimum or maximum but still divides by the number of samples
/// (the plugin's `getAveEx`), and the system averages are the sums of the client averages
/// (so System Average Throughput = total / samples when every client has as many samples).
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputSummary {
    /// System Total Throughput: messages of all clients in all samples.
    pub total: u64,
    /// System Total Clients.
    pub clients: usize,
    /// System Average Throughput: the sum of the clients' average throughput per sample.
    pub average: f64,
    /// System Average Throughput Excluding Min/Max.
    pub average_excluding: f64,
    /// System Average Client Throughput: `average / clients`.
    pub client_average: f64,
    /// System Average Client Throughput Excluding Min/Max.
    pub client_average_excluding: f64,
    /// Min Client Throughput Per Sample.
    pub min_sample: Named<u64>,
    /// Max Client Throughput Per Sample.
    pub max_sample: Named<u64>,
    /// Min Client Total Throughput.
    pub min_total: Named<u64>,
    /// Max Client Total Throughput.
    pub max_total: Named<u64>,
    /// Min Average Client Throughput.
    pub min_average: Named<f64>,
    /// Max Average Client Throughput.
    pub max_average: Named<f64>,
    /// Min Average Client Throughput Excluding Min/Max.
    pub min_average_excluding: Named<f64>,
    /// Max Average Client Throughput Excluding Min/Max.
    pub max_average_excluding: Named<f64>,
}

/// A client's average per sample, and the same leaving out its min and max samples.
fn averages(samples: &[u64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    let count = samples.len() as f64;
    let total: u64 = samples.iter().sum();
    let (min, max) = (samples.iter().min(), samples.iter().max());
    let kept: u64 = samples.iter().filter(|s| Some(*s) != min && Some(*s) != max).copied().sum();
    (total as f64 / count, kept as f64 / count)
}

/// Keeps the first client with the smallest (or largest) value, in client order.
fn pick<T: PartialOrd + Copy>(
    current: &mut Option<Named<T>>,
    client: &str,
    value: T,
    better: fn(T, T) -> bool,
) {
    if current.as_ref().is_none_or(|c| better(value, c.value)) {
        *current = Some(Named { client: client.to_owned(), value });
    }
}

impl ThroughputSummary {
    /// The summary of `clients`' samples; `None` without clients.
    pub fn compute(clients: &[ClientSamples]) -> Option<ThroughputSummary> {
        if clients.is_empty() {
            return None;
        }
        let lt_u = |a: u64, b: u64| a < b;
        let gt_u = |a: u64, b: u64| a > b;
        let lt_f = |a: f64, b: f64| a < b;
        let gt_f = |a: f64, b: f64| a > b;
        let (mut min_sample, mut max_sample, mut min_total, mut max_total) =
            (None, None, None, None);
        let (mut min_average, mut max_average, mut min_ex, mut max_ex) = (None, None, None, None);
        let (mut total, mut average, mut average_excluding) = (0u64, 0.0f64, 0.0f64);
        for client in clients {
            let name = client.name.as_str();
            // A client without samples counts as zero throughout, as in the plugin's
            // report when a client never got a sample in.
            let min = client.samples.iter().copied().min().unwrap_or(0);
            let max = client.samples.iter().copied().max().unwrap_or(0);
            let sum: u64 = client.samples.iter().sum();
            let (ave, ave_ex) = averages(&client.samples);
            total += sum;
            average += ave;
            average_excluding += ave_ex;
            pick(&mut min_sample, name, min, lt_u);
            pick(&mut max_sample, name, max, gt_u);
            pick(&mut min_total, name, sum, lt_u);
            pick(&mut max_total, name, sum, gt_u);
            pick(&mut min_average, name, ave, lt_f);
            pick(&mut max_average, name, ave, gt_f);
            pick(&mut min_ex, name, ave_ex, lt_f);
            pick(&mut max_ex, name, ave_ex, gt_f);
        }
        let count = clients.len();
        Some(ThroughputSummary {
            total,
            clients: count,
            average,
            average_excluding,
            client_average: average / count as f64,
            client_average_excluding: average_excluding / count as f64,
            min_sample: min_sample?,
            max_sample: max_sample?,
            min_total: min_total?,
            max_total: max_total?,
            min_average: min_average?,
            max_average: max_average?,
            min_average_excluding: min_ex?,
            max_average_excluding: max_ex?,
        })
    }

    /// The summary's `(label, value)` lines, values as the plugin prints them; also the
    /// XML report's `perfTpSummary` entries.
    pub fn lines(&self) -> Vec<(&'static str, &'static str, String)> {
        let named_u = |n: &Named<u64>| format!("clientName={}, value={}", n.client, n.value);
        let named_f =
            |n: &Named<f64>| format!("clientName={}, value={}", n.client, java_double(n.value));
        vec![
            ("SystemTotalTP", "System Total Throughput", self.total.to_string()),
            ("SystemTotalClients", "System Total Clients", self.clients.to_string()),
            ("SystemAveTP", "System Average Throughput", java_double(self.average)),
            (
                "SystemAveEMMTP",
                "System Average Throughput Excluding Min/Max",
                java_double(self.average_excluding),
            ),
            (
                "SystemAveClientTP",
                "System Average Client Throughput",
                java_double(self.client_average),
            ),
            (
                "SystemAveClientEMMTP",
                "System Average Client Throughput Excluding Min/Max",
                java_double(self.client_average_excluding),
            ),
            ("MinClientTP", "Min Client Throughput Per Sample", named_u(&self.min_sample)),
            ("MaxClientTP", "Max Client Throughput Per Sample", named_u(&self.max_sample)),
            ("MinClientTotalTP", "Min Client Total Throughput", named_u(&self.min_total)),
            ("MaxClientTotalTP", "Max Client Total Throughput", named_u(&self.max_total)),
            ("MinClientAveTP", "Min Average Client Throughput", named_f(&self.min_average)),
            ("MaxClientAveTP", "Max Average Client Throughput", named_f(&self.max_average)),
            (
                "MinClientAveEMMTP",
                "Min Average Client Throughput Excluding Min/Max",
                named_f(&self.min_average_excluding),
            ),
            (
                "MaxClientAveEMMTP",
                "Max Average Client Throughput Excluding Min/Max",
                named_f(&self.max_average_excluding),
            ),
        ]
    }
}

impl fmt::Display for ThroughputSummary {
    /// The plugin's block, line for line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "#########################################")?;
        writeln!(f, "####    SYSTEM THROUGHPUT SUMMARY    ####")?;
        writeln!(f, "#########################################")?;
        for (_, label, value) in self.lines() {
            writeln!(f, "{label}: {value}")?;
        }
        Ok(())
    }
}

/// A double as Java's `String.valueOf(double)` prints it: the shortest digits that read
/// back as the same number, always with a fraction (`74.0`), and in computerized
/// scientific notation below 10^-3 and from 10^7 on (`1.0E7`).
pub fn java_double(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if value == 0.0 {
        return if value.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    let magnitude = value.abs();
    if (1e-3..1e7).contains(&magnitude) {
        let text = value.to_string();
        if text.contains('.') {
            text
        } else {
            format!("{text}.0")
        }
    } else {
        // Rust's `{:e}` is the shortest round-trip form too: `1e7`, `1.5e-5`.
        let text = format!("{value:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa =
            if mantissa.contains('.') { mantissa.to_owned() } else { format!("{mantissa}.0") };
        format!("{mantissa}E{exponent}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(name: &str, samples: &[u64]) -> ClientSamples {
        ClientSamples { name: name.into(), samples: samples.to_vec() }
    }

    #[test]
    fn java_doubles_print_like_java() {
        assert_eq!(java_double(74.0), "74.0");
        assert_eq!(java_double(74.936), "74.936");
        assert_eq!(java_double(1873.4000000000003), "1873.4000000000003");
        assert_eq!(java_double(67.41333333333333), "67.41333333333333");
        assert_eq!(java_double(10_000_000.0), "1.0E7");
        assert_eq!(java_double(12_345_678.5), "1.23456785E7");
        assert_eq!(java_double(0.0005), "5.0E-4");
        assert_eq!(java_double(0.001), "0.001");
        assert_eq!(java_double(0.0), "0.0");
        assert_eq!(java_double(-2.5), "-2.5");
    }

    #[test]
    fn summary_follows_the_plugin_formulas() {
        // Two clients, four samples each.
        let clients =
            [client("JmsProducer0", &[10, 20, 30, 40]), client("JmsProducer1", &[5, 5, 5, 50])];
        let summary = ThroughputSummary::compute(&clients).expect("clients");
        assert_eq!(summary.total, 165);
        assert_eq!(summary.clients, 2);
        // Averages: 100/4 = 25 and 65/4 = 16.25; the system average is their sum, which
        // is also total / samples per client.
        assert_eq!(summary.average, 41.25);
        assert_eq!(summary.average, 165.0 / 4.0);
        // Excluding min/max: client 0 keeps 20 + 30 = 50, over 4 samples = 12.5; client 1
        // drops every 5 (all equal the min) and the 50, keeping nothing: 0.
        assert_eq!(summary.average_excluding, 12.5);
        assert_eq!(summary.client_average, 41.25 / 2.0);
        assert_eq!(summary.client_average_excluding, 6.25);
        assert_eq!(summary.min_sample, Named { client: "JmsProducer1".into(), value: 5 });
        assert_eq!(summary.max_sample, Named { client: "JmsProducer1".into(), value: 50 });
        assert_eq!(summary.min_total, Named { client: "JmsProducer1".into(), value: 65 });
        assert_eq!(summary.max_total, Named { client: "JmsProducer0".into(), value: 100 });
        assert_eq!(summary.min_average.value, 16.25);
        assert_eq!(summary.max_average.client, "JmsProducer0");
        assert_eq!(
            summary.min_average_excluding,
            Named { client: "JmsProducer1".into(), value: 0.0 }
        );
        assert_eq!(
            summary.max_average_excluding,
            Named { client: "JmsProducer0".into(), value: 12.5 }
        );
    }

    #[test]
    fn ties_go_to_the_first_client() {
        let clients = [client("C0", &[3, 3]), client("C1", &[3, 3])];
        let summary = ThroughputSummary::compute(&clients).expect("clients");
        assert_eq!(
            (summary.min_sample.client.as_str(), summary.max_total.client.as_str()),
            ("C0", "C0")
        );
        assert!(ThroughputSummary::compute(&[]).is_none());
    }

    #[test]
    fn the_block_reads_like_the_plugin() {
        let clients = [client("JmsConsumer0", &[2, 4]), client("JmsConsumer1", &[3, 3])];
        let text = ThroughputSummary::compute(&clients).expect("clients").to_string();
        let expected = "\
#########################################
####    SYSTEM THROUGHPUT SUMMARY    ####
#########################################
System Total Throughput: 12
System Total Clients: 2
System Average Throughput: 6.0
System Average Throughput Excluding Min/Max: 0.0
System Average Client Throughput: 3.0
System Average Client Throughput Excluding Min/Max: 0.0
Min Client Throughput Per Sample: clientName=JmsConsumer0, value=2
Max Client Throughput Per Sample: clientName=JmsConsumer0, value=4
Min Client Total Throughput: clientName=JmsConsumer0, value=6
Max Client Total Throughput: clientName=JmsConsumer0, value=6
Min Average Client Throughput: clientName=JmsConsumer0, value=3.0
Max Average Client Throughput: clientName=JmsConsumer0, value=3.0
Min Average Client Throughput Excluding Min/Max: clientName=JmsConsumer0, value=0.0
Max Average Client Throughput Excluding Min/Max: clientName=JmsConsumer0, value=0.0
";
        assert_eq!(text, expected);
    }

    #[test]
    fn seed_figures_are_consistent_with_the_formulas() {
        // Seed 000: 25 producers, 300 one-second samples each, 562020 messages in total.
        let average = 562_020.0 / 300.0;
        assert_eq!(java_double(average), "1873.4");
        assert_eq!(java_double(average / 25.0), "74.936");
        // The plugin added 25 client averages; their sum rounds to 1873.4000000000003 there.
    }
}
