//! The request history (spec package `metrics`, its file end): each finished request is
//! one JSON line in `GLIDER_HOME/history/requests-YYYY-MM-DD[.N].jsonl` (UTC day of its
//! end; a new part `.N` when a file reaches its size limit), written by one background
//! thread so no request ever waits on a disk, and read back newest first for paging.
//! Prompt text is never written: a `RequestRecord` has none.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;

/// A file is closed and the next part started once it holds this many bytes.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Days of history kept; older files are deleted when the writer starts or a day begins.
pub const KEEP_DAYS: u64 = 30;
/// Lines waiting for the writer; past this a line is dropped and counted.
pub const QUEUE: usize = 8192;

const DAY_MS: u64 = 86_400_000;

/// Where and how the history is kept.
#[derive(Debug, Clone)]
pub struct HistoryOptions {
    pub dir: PathBuf,
    pub max_file_bytes: u64,
    pub keep_days: u64,
}

impl HistoryOptions {
    /// The defaults under `home` (`home/history`).
    pub fn under(home: &Path) -> Self {
        HistoryOptions {
            dir: home.join("history"),
            max_file_bytes: MAX_FILE_BYTES,
            keep_days: KEEP_DAYS,
        }
    }
}

/// Counters the status endpoint shows.
#[derive(Debug, Default)]
pub struct HistoryStats {
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    pub errors: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// One line for the writer: the entry's end time decides its day.
#[derive(Debug)]
pub struct Line {
    pub ended_at_ms: u64,
    pub json: String,
}

/// The sending end, held by the collector; the writer thread ends when it is dropped.
pub struct History {
    pub options: HistoryOptions,
    pub stats: Arc<HistoryStats>,
    sender: Mutex<Option<mpsc::Sender<Line>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl History {
    /// Create the directory, drop expired files and start the writer thread.
    pub fn start(options: HistoryOptions) -> std::io::Result<History> {
        std::fs::create_dir_all(&options.dir)?;
        let stats = Arc::new(HistoryStats::default());
        let (sender, receiver) = mpsc::channel(QUEUE);
        let writer = Writer {
            options: options.clone(),
            stats: stats.clone(),
            current: None,
        };
        let thread = std::thread::Builder::new()
            .name("glider-history".into())
            .spawn(move || writer.run(receiver))?;
        Ok(History {
            options,
            stats,
            sender: Mutex::new(Some(sender)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queue a line; never waits. A full queue drops it (and counts it).
    pub fn append(&self, line: Line) {
        let sender = self.sender.lock().unwrap_or_else(|p| p.into_inner());
        let sent = sender.as_ref().map(|s| s.try_send(line).is_ok());
        if sent != Some(true) {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Stop taking lines, write what is queued, and wait for the writer to finish.
    pub async fn close(&self) {
        self.sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }

    /// Up to `limit` entries with `seq < before` (all when `None`), newest first.
    pub async fn read_before(&self, before: Option<u64>, limit: usize) -> Vec<Value> {
        let dir = self.options.dir.clone();
        tokio::task::spawn_blocking(move || read_before(&dir, before, limit))
            .await
            .unwrap_or_default()
    }
}

/// The open file the writer appends to.
struct Current {
    day: String,
    part: u32,
    size: u64,
    file: BufWriter<File>,
}

struct Writer {
    options: HistoryOptions,
    stats: Arc<HistoryStats>,
    current: Option<Current>,
}

impl Writer {
    fn run(mut self, mut receiver: mpsc::Receiver<Line>) {
        self.expire(crate::unix_ms());
        while let Some(line) = receiver.blocking_recv() {
            self.write(&line);
            // Write what else is waiting, then flush once for the batch.
            while let Ok(line) = receiver.try_recv() {
                self.write(&line);
            }
            if let Some(current) = &mut self.current
                && let Err(e) = current.file.flush()
            {
                self.failed(&format!("flush: {e}"));
                self.current = None;
            }
        }
        if let Some(current) = &mut self.current {
            let _ = current.file.flush();
        }
    }

    fn write(&mut self, line: &Line) {
        let day = utc_day(line.ended_at_ms);
        let bytes = line.json.len() as u64 + 1;
        let roll = match &self.current {
            None => true,
            Some(c) => c.day != day || (c.size + bytes > self.options.max_file_bytes && c.size > 0),
        };
        if roll {
            if self.current.as_ref().is_some_and(|c| c.day != day) {
                self.expire(line.ended_at_ms);
            }
            let next_part = match &self.current {
                Some(c) if c.day == day => Some(c.part + 1),
                _ => None,
            };
            if let Some(mut old) = self.current.take() {
                let _ = old.file.flush();
            }
            match self.open(&day, next_part) {
                Ok(current) => self.current = Some(current),
                Err(e) => {
                    self.failed(&format!("open {day}: {e}"));
                    return;
                }
            }
        }
        let Some(current) = &mut self.current else {
            return;
        };
        let result = current
            .file
            .write_all(line.json.as_bytes())
            .and_then(|_| current.file.write_all(b"\n"));
        match result {
            Ok(()) => {
                current.size += bytes;
                self.stats.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.failed(&format!("write: {e}"));
                self.current = None;
            }
        }
    }

    /// Open `day`'s file to append: `part` if given, else the latest part with room.
    fn open(&self, day: &str, part: Option<u32>) -> std::io::Result<Current> {
        let mut part = match part {
            Some(part) => part,
            None => list_files(&self.options.dir)
                .into_iter()
                .filter(|f| f.day == day)
                .map(|f| f.part)
                .max()
                .unwrap_or(0),
        };
        loop {
            let path = self.options.dir.join(file_name(day, part));
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            if size >= self.options.max_file_bytes {
                part += 1;
                continue;
            }
            let mut file = OpenOptions::new().create(true).append(true).open(&path)?;
            // A crash may have left half a line: start ours on a fresh one.
            if size > 0 && !ends_with_newline(&path) {
                file.write_all(b"\n")?;
            }
            return Ok(Current {
                day: day.to_owned(),
                part,
                size,
                file: BufWriter::new(file),
            });
        }
    }

    /// Delete files older than `keep_days` before `now_ms`.
    fn expire(&self, now_ms: u64) {
        let cutoff = utc_day(now_ms.saturating_sub(self.options.keep_days * DAY_MS));
        for file in list_files(&self.options.dir) {
            if file.day < cutoff
                && let Err(e) = std::fs::remove_file(&file.path)
            {
                self.failed(&format!("remove {}: {e}", file.path.display()));
            }
        }
    }

    fn failed(&self, message: &str) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let mut last = self
            .stats
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if last.as_deref() != Some(message) {
            tracing::warn!(dir = %self.options.dir.display(), "request history: {message}");
        }
        *last = Some(message.to_owned());
    }
}

fn ends_with_newline(path: &Path) -> bool {
    let mut last = [0u8; 1];
    File::open(path)
        .and_then(|mut f| {
            f.seek(SeekFrom::End(-1))?;
            f.read_exact(&mut last)
        })
        .map(|_| last[0] == b'\n')
        .unwrap_or(true)
}

/// One history file on disk.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct HistoryFile {
    day: String,
    part: u32,
    path: PathBuf,
}

fn file_name(day: &str, part: u32) -> String {
    if part == 0 {
        format!("requests-{day}.jsonl")
    } else {
        format!("requests-{day}.{part}.jsonl")
    }
}

/// History files, oldest first.
fn list_files(dir: &Path) -> Vec<HistoryFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<HistoryFile> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let stem = name.strip_prefix("requests-")?.strip_suffix(".jsonl")?;
            let (day, part) = match stem.split_once('.') {
                Some((day, part)) => (day, part.parse().ok()?),
                None => (stem, 0),
            };
            let valid_day = day.len() == 10 && day.bytes().filter(|b| *b == b'-').count() == 2;
            valid_day.then(|| HistoryFile {
                day: day.to_owned(),
                part,
                path: entry.path(),
            })
        })
        .collect();
    files.sort();
    files
}

/// Entries of one file that parse, in file order (a torn line is skipped).
fn read_file(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("seq").and_then(Value::as_u64).is_some())
        .collect()
}

fn seq_of(entry: &Value) -> u64 {
    entry.get("seq").and_then(Value::as_u64).unwrap_or(0)
}

/// Up to `limit` entries with `seq < before`, newest first, across files.
pub fn read_before(dir: &Path, before: Option<u64>, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for file in list_files(dir).into_iter().rev() {
        if out.len() >= limit {
            break;
        }
        let entries = read_file(&file.path);
        for entry in entries.into_iter().rev() {
            if before.is_none_or(|b| seq_of(&entry) < b) {
                out.push(entry);
                if out.len() >= limit {
                    break;
                }
            }
        }
    }
    out
}

/// The highest `seq` written so far (0 for an empty history), so numbering continues
/// across restarts.
pub fn last_seq(dir: &Path) -> u64 {
    list_files(dir)
        .iter()
        .rev()
        .find_map(|f| read_file(&f.path).iter().map(seq_of).max())
        .unwrap_or(0)
}

/// `YYYY-MM-DD` (UTC) of a Unix time in milliseconds.
pub fn utc_day(unix_ms: u64) -> String {
    let (y, m, d) = civil_from_days((unix_ms / DAY_MS) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_days() {
        assert_eq!(utc_day(0), "1970-01-01");
        assert_eq!(utc_day(951_782_400_000), "2000-02-29");
        assert_eq!(utc_day(1_735_689_599_999), "2024-12-31");
        assert_eq!(utc_day(1_735_689_600_000), "2025-01-01");
    }

    #[tokio::test]
    async fn a_new_day_starts_a_new_file_old_days_expire_and_torn_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let now = crate::unix_ms();
        let today = utc_day(now);
        let yesterday = utc_day(now - DAY_MS);
        std::fs::write(
            dir.path().join("requests-2000-01-01.jsonl"),
            "{\"seq\":1}\n",
        )
        .expect("write");
        // A crash left half a line at the end of today's file.
        std::fs::write(
            dir.path().join(file_name(&today, 0)),
            "{\"seq\":2}\n{\"seq\":",
        )
        .expect("write");
        let history = History::start(HistoryOptions {
            dir: dir.path().to_path_buf(),
            max_file_bytes: MAX_FILE_BYTES,
            keep_days: 30,
        })
        .expect("start");
        for (seq, at) in [(3, now - DAY_MS), (4, now)] {
            history.append(Line {
                ended_at_ms: at,
                json: format!("{{\"seq\":{seq}}}"),
            });
        }
        history.close().await;
        let days: Vec<String> = list_files(dir.path()).into_iter().map(|f| f.day).collect();
        assert_eq!(days, vec![yesterday, today], "2000-01-01 expired");
        let seqs: Vec<u64> = read_before(dir.path(), None, 10)
            .iter()
            .map(seq_of)
            .collect();
        assert_eq!(seqs, vec![4, 2, 3], "newest file first, torn line skipped");
        assert_eq!(last_seq(dir.path()), 4);
        assert_eq!(history.stats.written.load(Ordering::Relaxed), 2);
        // Closed: further lines are counted as dropped, not lost silently.
        history.append(Line {
            ended_at_ms: now,
            json: "{}".into(),
        });
        assert_eq!(history.stats.dropped.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn file_names_sort_by_day_then_part() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "requests-2025-01-02.jsonl",
            "requests-2025-01-01.10.jsonl",
            "requests-2025-01-01.2.jsonl",
            "requests-2025-01-01.jsonl",
            "other.txt",
        ] {
            std::fs::write(dir.path().join(name), "").expect("write");
        }
        let order: Vec<(String, u32)> = list_files(dir.path())
            .into_iter()
            .map(|f| (f.day, f.part))
            .collect();
        assert_eq!(
            order,
            vec![
                ("2025-01-01".into(), 0),
                ("2025-01-01".into(), 2),
                ("2025-01-01".into(), 10),
                ("2025-01-02".into(), 0)
            ]
        );
    }
}
