//! Shared bits of the benchmark binaries (`glider-load`, `glider-hotpath`,
//! `glider-hedge`, `glider-plugins`): latency summaries, a tiny flag parser, and the
//! `main` of an in-process case ([`run_case`]). The harness that runs them is `bench/run.sh`.

use std::future::Future;
use std::process::ExitCode;

use serde_json::{Value, json};

/// Percentiles (nearest rank) of `samples`, in the samples' unit, as JSON.
pub fn summary(samples: &mut [u64]) -> Value {
    if samples.is_empty() {
        return json!(null);
    }
    samples.sort_unstable();
    let at = |p: f64| {
        let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1]
    };
    let mean = samples.iter().map(|&s| s as f64).sum::<f64>() / samples.len() as f64;
    json!({
        "n": samples.len(),
        "min": samples[0],
        "mean": (mean * 10.0).round() / 10.0,
        "p50": at(50.0),
        "p90": at(90.0),
        "p99": at(99.0),
        "max": samples[samples.len() - 1],
    })
}

/// `--name value` / `--name=value` flags; repeated flags keep every value.
pub struct Flags {
    pairs: Vec<(String, String)>,
    switches: Vec<String>,
}

impl Flags {
    /// Parse `args`; a flag listed in `switches` takes no value.
    pub fn parse(args: impl Iterator<Item = String>, switches: &[&str]) -> Result<Flags, String> {
        let mut pairs = Vec::new();
        let mut found = Vec::new();
        let mut args = args;
        while let Some(arg) = args.next() {
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(format!("unexpected argument {arg:?}"));
            };
            if switches.contains(&flag) {
                found.push(flag.to_owned());
                continue;
            }
            match flag.split_once('=') {
                Some((name, value)) => pairs.push((name.to_owned(), value.to_owned())),
                None => {
                    let value = args
                        .next()
                        .ok_or_else(|| format!("--{flag} needs a value"))?;
                    pairs.push((flag.to_owned(), value));
                }
            }
        }
        Ok(Flags {
            pairs,
            switches: found,
        })
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.pairs
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn number(&self, name: &str, default: u64) -> Result<u64, String> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: not a number: {v}")),
        }
    }

    pub fn switch(&self, name: &str) -> bool {
        self.switches.iter().any(|s| s == name)
    }
}

/// The `main` of an in-process bench binary `name`: its options from `parse` (a bad
/// one exits 2), then `work` on a multi-thread runtime; the report is printed as one
/// `BENCH_JSON {...}` line (what bench/harness.py reads), an error on stderr.
pub fn run_case<O, F>(
    name: &str,
    parse: impl FnOnce() -> Result<O, String>,
    work: impl FnOnce(O) -> F,
) -> ExitCode
where
    F: Future<Output = Result<Value, String>>,
{
    let opts = match parse() {
        Ok(opts) => opts,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("{name}: no runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(work(opts)) {
        Ok(report) => {
            println!("BENCH_JSON {report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{name}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut samples: Vec<u64> = (1..=100).rev().collect();
        let s = summary(&mut samples);
        assert_eq!(s["p50"], 50);
        assert_eq!(s["p90"], 90);
        assert_eq!(s["p99"], 99);
        assert_eq!(s["min"], 1);
        assert_eq!(s["max"], 100);
        assert_eq!(summary(&mut []), json!(null));
    }

    #[test]
    fn flags_parse() {
        let args = [
            "--url",
            "u",
            "--header=a: b",
            "--header",
            "c: d",
            "--stream",
        ];
        let flags = Flags::parse(args.iter().map(|s| s.to_string()), &["stream"]).expect("ok");
        assert_eq!(flags.get("url"), Some("u"));
        assert_eq!(flags.all("header"), vec!["a: b", "c: d"]);
        assert!(flags.switch("stream"));
        assert_eq!(flags.number("c", 3), Ok(3));
        assert!(Flags::parse(["--x".to_string()].into_iter(), &[]).is_err());
    }
}
