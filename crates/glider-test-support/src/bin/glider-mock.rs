//! `glider-mock`: run the mock vendor server standalone (for benchmarks). Prints
//! `listening on 127.0.0.1:PORT` once ready and serves until SIGTERM or ctrl-c.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use glider_test_support::{MockConfig, MockVendor};

const USAGE: &str = "usage: glider-mock [--port N] [--deltas N] [--first-byte-delay-ms N] \
[--delta-delay-ms N] [--reply-text S] [--model M]... [--thinking-model M]...";

fn parse_args(args: impl Iterator<Item = String>) -> Result<(u16, MockConfig), String> {
    let mut config = MockConfig {
        record: false,
        ..MockConfig::default()
    };
    let mut port = 0u16;
    let mut args = args;
    while let Some(flag) = args.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.to_string());
        }
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))
        };
        let number = |v: String| -> Result<u64, String> {
            v.parse::<u64>()
                .map_err(|_| format!("{name}: not a number: {v}"))
        };
        match name.as_str() {
            "--port" => {
                port = u16::try_from(number(value()?)?)
                    .map_err(|_| format!("--port: out of range\n{USAGE}"))?;
            }
            "--deltas" => config.deltas = number(value()?)?.max(1) as usize,
            "--first-byte-delay-ms" => {
                config.first_byte_delay = Duration::from_millis(number(value()?)?);
            }
            "--delta-delay-ms" => config.delta_delay = Duration::from_millis(number(value()?)?),
            "--reply-text" => config.reply_text = Some(value()?),
            "--model" => config.models.push(value()?),
            "--thinking-model" => config.thinking_models.push(value()?),
            other => return Err(format!("unknown argument: {other}\n{USAGE}")),
        }
    }
    Ok((port, config))
}

async fn terminated() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let (port, config) = match parse_args(std::env::args().skip(1)) {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mock = match MockVendor::start_on(addr, config).await {
        Ok(mock) => mock,
        Err(e) => {
            eprintln!("glider-mock: cannot bind {addr}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "listening on {}", mock.addr);
    let _ = stdout.flush();
    drop(stdout);
    terminated().await;
    mock.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(u16, MockConfig), String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_flags() {
        let (port, cfg) = parse(&[
            "--port",
            "8080",
            "--deltas=7",
            "--first-byte-delay-ms",
            "5",
            "--delta-delay-ms",
            "2",
            "--reply-text",
            "hi there",
            "--model",
            "a",
            "--model",
            "b",
            "--thinking-model",
            "c",
        ])
        .expect("valid flags");
        assert_eq!(port, 8080);
        assert_eq!(cfg.deltas, 7);
        assert_eq!(cfg.first_byte_delay, Duration::from_millis(5));
        assert_eq!(cfg.delta_delay, Duration::from_millis(2));
        assert_eq!(cfg.reply_text.as_deref(), Some("hi there"));
        assert_eq!(cfg.models, vec!["a", "b"]);
        assert_eq!(cfg.thinking_models, vec!["c"]);
        assert!(!cfg.record);
        assert!(parse(&["--bogus"]).is_err());
        assert!(parse(&["--port"]).is_err());
        assert!(parse(&["--port", "x"]).is_err());
    }
}
