//! The request history (spec package `metrics`, its file end): each finished request is
//! one JSON line in `GLIDER_HOME/history/requests-YYYY-MM-DD[.N].jsonl` (UTC day of its
//! end; a new part `.N` when a file reaches its size limit), written by one background
//! thread so no request ever waits on a disk, and read back newest first for paging.
//! Prompt text is never written: a `RequestRecord` has none, and what it has that came
//! from a prompt (a tool call's arguments, an error quoting a reply) has its API keys
//! replaced ([`glider_sys::secrets`]) when the line is made ([`Line::new`]) and again
//! when a line is read back (lines written before keys were redacted). The directory
//! is 0700 and its files 0600, so other local users cannot read the request metadata.

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
/// How long the writer lets lines gather after the first of a batch.
const BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(5);

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
    /// The entry's JSON text, shared with the collector's in-memory list.
    pub json: std::sync::Arc<str>,
}

impl Line {
    /// The line of an entry serialized as `json`, its API keys replaced (a key's
    /// characters need no escaping in JSON, so the text is scanned as it is).
    pub fn new(ended_at_ms: u64, json: String) -> Line {
        let json = match glider_sys::secrets::redact_keys(&json) {
            std::borrow::Cow::Borrowed(_) => json,
            std::borrow::Cow::Owned(redacted) => redacted,
        };
        Line {
            ended_at_ms,
            json: json.into(),
        }
    }
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
        // Request metadata is the user's business: owner-only directory and files.
        glider_sys::fileacl::private_dir(&options.dir)?;
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
            // Let a busy gateway's lines gather, then write what is waiting and flush
            // once for the batch: one wake-up and one write(2) per batch, not per
            // request (under load that was a context switch per request).
            std::thread::sleep(BATCH_WAIT);
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
            let mut file = append_private(&path)?;
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

/// Open `path` to append, creating it owner-only (0600) if it is new.
fn append_private(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, glider_sys::fileacl::PRIVATE_FILE);
    options.open(path)
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

/// Bytes read from the end of a file at a time when paging backwards.
const BLOCK_BYTES: usize = 64 * 1024;
/// A line longer than this is no request record (those are a few hundred bytes): it is
/// skipped, so one damaged file cannot make a page hold it whole.
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// A file's lines, last first, read block by block from its end: a page of the newest
/// requests costs a few blocks, and no read holds more than a block and one line,
/// whatever the history's size.
#[derive(Debug)]
struct LinesBackwards {
    file: File,
    /// Bytes before this offset are not read yet.
    unread: u64,
    /// The file's bytes from `unread` up to the lines already handed out.
    pending: Vec<u8>,
    /// `pending` is the tail of an overlong line, to be dropped up to its start.
    skipping: bool,
}

impl LinesBackwards {
    fn open(path: &Path) -> Option<LinesBackwards> {
        let file = File::open(path).ok()?;
        let unread = file.metadata().ok()?.len();
        Some(LinesBackwards {
            file,
            unread,
            pending: Vec::new(),
            skipping: false,
        })
    }

    /// Prepend the block before `pending`; false at the start of the file or on error.
    fn read_block(&mut self) -> bool {
        if self.unread == 0 {
            return false;
        }
        let len = BLOCK_BYTES.min(usize::try_from(self.unread).unwrap_or(BLOCK_BYTES));
        let start = self.unread - len as u64;
        let mut block = vec![0u8; len];
        let read = self
            .file
            .seek(SeekFrom::Start(start))
            .and_then(|_| self.file.read_exact(&mut block));
        if read.is_err() {
            return false;
        }
        self.unread = start;
        block.extend_from_slice(&self.pending);
        self.pending = block;
        cost::count(len, self.pending.len());
        true
    }
}

impl Iterator for LinesBackwards {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(newline) = self.pending.iter().rposition(|b| *b == b'\n') {
                let line = self.pending.split_off(newline + 1);
                self.pending.truncate(newline);
                if std::mem::take(&mut self.skipping) {
                    continue;
                }
                return Some(line);
            }
            if self.pending.len() > MAX_LINE_BYTES {
                self.pending = Vec::new();
                self.skipping = true;
            }
            if !self.read_block() {
                let rest = std::mem::take(&mut self.pending);
                return (!rest.is_empty() && !std::mem::take(&mut self.skipping)).then_some(rest);
            }
        }
    }
}

/// What reading the history cost this thread: bytes read and the most a reader held at
/// once. Tests read it to show that a page's memory is bounded whatever the history's size.
mod cost {
    use std::cell::Cell;

    thread_local! {
        static READ: Cell<u64> = const { Cell::new(0) };
        static MOST_HELD: Cell<usize> = const { Cell::new(0) };
    }

    pub(super) fn count(read: usize, held: usize) {
        READ.with(|r| r.set(r.get() + read as u64));
        MOST_HELD.with(|m| m.set(m.get().max(held)));
    }

    /// `(bytes read, most bytes held)` since the last call, which starts a new count.
    #[cfg(test)]
    pub(super) fn take() -> (u64, usize) {
        (
            READ.with(|r| r.replace(0)),
            MOST_HELD.with(|m| m.replace(0)),
        )
    }
}

/// Just the `seq` of a line, to pass over entries a page does not want without building
/// them.
#[derive(serde::Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// The entry a history line holds, when it is one: a JSON object with an unsigned `seq`
/// (a torn or foreign line is skipped). `wanted` sees the `seq` first, so a line it
/// refuses is never built into a `Value`.
fn parse_entry(line: &[u8], wanted: impl Fn(u64) -> bool) -> Option<Value> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    if let Ok(SeqOnly { seq }) = serde_json::from_slice::<SeqOnly>(line)
        && !wanted(seq)
    {
        return None;
    }
    let mut entry: Value = serde_json::from_slice(line).ok()?;
    let seq = entry.get("seq").and_then(Value::as_u64)?;
    glider_sys::secrets::redact_keys_in_json(&mut entry);
    wanted(seq).then_some(entry)
}

/// Lines of `files`, newest file first and each file last line first.
fn lines_backwards(files: Vec<HistoryFile>) -> impl Iterator<Item = Vec<u8>> {
    files
        .into_iter()
        .rev()
        .filter_map(|file| LinesBackwards::open(&file.path))
        .flatten()
}

/// Entries of `files`, newest file first and each file last line first.
fn entries_backwards(
    files: Vec<HistoryFile>,
    wanted: impl Fn(u64) -> bool + Copy,
) -> impl Iterator<Item = Value> {
    lines_backwards(files).filter_map(move |line| parse_entry(&line, wanted))
}

/// The newest `limit` entries as their `seq` and JSON text, newest first: the lines
/// [`read_before`] would build into values (a JSON object with an unsigned `seq`),
/// kept as text — what the dashboard's in-memory list holds.
pub fn newest_texts(dir: &Path, limit: usize) -> Vec<(u64, String)> {
    lines_backwards(list_files(dir))
        .filter_map(|line| {
            let SeqOnly { seq } = serde_json::from_slice(&line).ok()?;
            let mut text = String::from_utf8(line).ok()?;
            glider_sys::secrets::redact_keys_in(&mut text);
            Some((seq, text))
        })
        .take(limit)
        .collect()
}

/// An entry's `seq` (0 when it has none).
pub fn seq_of(entry: &Value) -> u64 {
    entry.get("seq").and_then(Value::as_u64).unwrap_or(0)
}

/// Up to `limit` entries with `seq < before`, newest first, across files. Files are read
/// from their ends, so memory stays at one block plus the page.
pub fn read_before(dir: &Path, before: Option<u64>, limit: usize) -> Vec<Value> {
    entries_backwards(list_files(dir), |seq| before.is_none_or(|b| seq < b))
        .take(limit)
        .collect()
}

/// The newest entry under `dir` that `wanted` accepts, read from the files' ends (one
/// block in memory at a time), e.g. a request by its id for `route explain --compare`.
pub fn newest_where(dir: &Path, wanted: impl FnMut(&Value) -> bool) -> Option<Value> {
    entries_backwards(list_files(dir), |_| true).find(wanted)
}

/// The highest `seq` written so far (0 for an empty history), so numbering continues
/// across restarts: the last entry of the newest file that has one, since the one writer
/// appends entries in `seq` order.
pub fn last_seq(dir: &Path) -> u64 {
    entries_backwards(list_files(dir), |_| true)
        .next()
        .map(|entry| seq_of(&entry))
        .unwrap_or(0)
}

/// Each entry of the files from `since_ms`'s UTC day on, oldest file first and in file
/// order, as the ledger reads it, until `f` returns false. A torn or foreign line is
/// skipped.
pub fn for_each_since(
    dir: &Path,
    since_ms: u64,
    mut f: impl FnMut(crate::ledger::HistoryRow) -> bool,
) {
    use std::io::BufRead;
    let first_day = utc_day(since_ms);
    for file in list_files(dir).into_iter().filter(|f| f.day >= first_day) {
        let Ok(opened) = File::open(&file.path) else {
            continue;
        };
        for line in std::io::BufReader::new(opened).split(b'\n') {
            let Ok(line) = line else { break };
            if let Ok(entry) = serde_json::from_slice::<crate::ledger::HistoryRow>(&line)
                && !f(entry)
            {
                return;
            }
        }
    }
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
                json: format!("{{\"seq\":{seq}}}").into(),
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
        // The same entries as text, for the dashboard's in-memory list.
        let texts = newest_texts(dir.path(), 10);
        let text_seqs: Vec<u64> = texts.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(text_seqs, seqs);
        assert_eq!(texts[0].1, "{\"seq\":4}");
        assert_eq!(newest_texts(dir.path(), 2).len(), 2);
        assert_eq!(history.stats.written.load(Ordering::Relaxed), 2);
        // Closed: further lines are counted as dropped, not lost silently.
        history.append(Line {
            ended_at_ms: now,
            json: "{}".into(),
        });
        assert_eq!(history.stats.dropped.load(Ordering::Relaxed), 1);
    }

    const PER_FILE: u64 = 22_000;
    const PARTS: [(&str, u32); 4] = [
        ("2025-01-01", 0),
        ("2025-01-01", 1),
        ("2025-01-02", 0),
        ("2025-01-02", 1),
    ];

    /// Four files of ~6.5 MB, seq 1.. in order; one ends torn, some blank lines.
    fn write_large_history(dir: &Path) -> u64 {
        let pad = "x".repeat(200);
        let mut seq = 0;
        for (i, (day, part)) in PARTS.iter().enumerate() {
            let mut text = String::new();
            for _ in 0..PER_FILE {
                seq += 1;
                text.push_str(&format!(
                    "{{\"seq\":{seq},\"id\":{seq},\"front\":\"anthropic\",\"backend\":\"local\",\"status\":200,\"total_ms\":12,\"pad\":\"{pad}\"}}\n"
                ));
                if seq % 10_000 == 0 {
                    text.push('\n');
                }
            }
            if i == 1 {
                text.push_str("{\"seq\":99999999,\"id\"");
            }
            std::fs::write(dir.join(file_name(day, *part)), text).expect("write history");
        }
        seq
    }

    /// The history as it was read before: each file parsed whole, newest file first.
    fn whole_parse(dir: &Path) -> Vec<Value> {
        let mut out = Vec::new();
        for (day, part) in PARTS.iter().rev() {
            let text = std::fs::read_to_string(dir.join(file_name(day, *part))).expect("read");
            let entries: Vec<Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v.get("seq").and_then(Value::as_u64).is_some())
                .collect();
            out.extend(entries.into_iter().rev());
        }
        out
    }

    #[test]
    fn pages_of_a_large_history_match_a_whole_parse_and_hold_a_bounded_amount() {
        let dir = tempfile::tempdir().expect("tempdir");
        let newest = write_large_history(dir.path());
        let size: u64 = list_files(dir.path())
            .iter()
            .map(|f| std::fs::metadata(&f.path).expect("meta").len())
            .sum();
        assert!(size > 24 * 1024 * 1024, "tens of MB: {size}");
        // One block and one line (~300 bytes) at most, whatever the history's size.
        let held_bound = 2 * BLOCK_BYTES;

        cost::take();
        assert_eq!(last_seq(dir.path()), newest);
        let (read, held) = cost::take();
        assert!(
            read <= BLOCK_BYTES as u64 && held <= held_bound,
            "last_seq: read {read}, held {held}"
        );

        // The first page, what start-up restores (1000), and pages across file
        // boundaries (the newest file starts at 3 * PER_FILE + 1; file 2 ends torn).
        let cases = [
            (None, 500),
            (None, 1000),
            (Some(3 * PER_FILE + 100), 500),
            (Some(2 * PER_FILE + 3), 10),
            (Some(PER_FILE + 1), 5),
            (Some(250), 500),
            (Some(1), 500),
        ];
        let whole = whole_parse(dir.path());
        for (before, limit) in cases {
            cost::take();
            let page = read_before(dir.path(), before, limit);
            let (read, held) = cost::take();
            let expected: Vec<Value> = whole
                .iter()
                .filter(|v| before.is_none_or(|b| seq_of(v) < b))
                .take(limit)
                .cloned()
                .collect();
            let seqs = |page: &[Value]| page.iter().map(seq_of).collect::<Vec<_>>();
            assert_eq!(
                seqs(&page),
                seqs(&expected),
                "before {before:?} limit {limit}"
            );
            assert_eq!(page, expected, "before {before:?} limit {limit}");
            assert!(
                held <= held_bound,
                "before {before:?} limit {limit}: held {held} bytes of a {size}-byte history"
            );
            if before.is_none() {
                // The newest page reads only the end of the newest file.
                assert!(read < 1024 * 1024, "limit {limit}: read {read} bytes");
            }
        }
        let across = read_before(dir.path(), Some(3 * PER_FILE + 100), 500);
        assert_eq!(across.first().map(seq_of), Some(3 * PER_FILE + 99));
        assert_eq!(across.last().map(seq_of), Some(3 * PER_FILE - 400));
    }

    #[test]
    fn an_overlong_line_is_skipped_without_being_held_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let huge = format!(
            "{{\"seq\":2,\"pad\":\"{}\"}}",
            "y".repeat(3 * MAX_LINE_BYTES)
        );
        std::fs::write(
            dir.path().join(file_name("2025-01-01", 0)),
            format!("{{\"seq\":1}}\n{huge}\n{{\"seq\":3}}\n"),
        )
        .expect("write");
        cost::take();
        let seqs: Vec<u64> = read_before(dir.path(), None, 10)
            .iter()
            .map(seq_of)
            .collect();
        let (_, held) = cost::take();
        assert_eq!(seqs, vec![3, 1]);
        assert!(held <= MAX_LINE_BYTES + 2 * BLOCK_BYTES, "held {held}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn history_directory_and_files_are_private_to_their_owner() {
        use std::os::unix::fs::PermissionsExt;
        let home = tempfile::tempdir().expect("tempdir");
        let options = HistoryOptions::under(home.path());
        let history = History::start(options.clone()).expect("start");
        history.append(Line {
            ended_at_ms: crate::unix_ms(),
            json: "{\"seq\":1}".into(),
        });
        history.close().await;
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&options.dir), 0o700);
        let files = list_files(&options.dir);
        assert_eq!(files.len(), 1);
        assert_eq!(mode(&files[0].path), 0o600);
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
