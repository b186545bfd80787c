//! A child process's stdout read line by line on a thread, and a bounded wait for the
//! line that says something happened (a port opened, a drain began).

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Guards a wait against a hang; never a timing assertion.
const HANG_GUARD: Duration = Duration::from_secs(30);

/// The lines `child` writes to its (piped) stdout, as they come.
pub struct OutputLines {
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl OutputLines {
    /// Takes `child`'s stdout (it must be piped) and reads it on a thread.
    pub fn of(child: &mut Child) -> OutputLines {
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        OutputLines {
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line containing `needle`; panics with every line seen if none comes.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {needle:?}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }
}
